package cli

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/sparkles-dev/sparkles/client"
	"github.com/sparkles-dev/sparkles/internal/workspace"
	"github.com/sparkles-dev/sparkles/sandbox"
)

func newCpCommand() *cli.Command {
	return &cli.Command{
		Name:      "cp",
		Usage:     "copy files and directories into and out of a sandbox's workspace",
		ArgsUsage: "SRC DST",
		Description: "Either side is a sandbox's path, SANDBOX_ID:PATH (relative to the workspace; a leading / is its\n" +
			"root), or a local path; `-` as the local side is stdin or stdout. As with docker cp:\n" +
			"  a file goes to DST, or into DST when DST is a directory or ends with /;\n" +
			"  a directory goes into DST when DST is a directory, else it becomes DST;\n" +
			"  SRC ending with /. copies what the directory holds instead of the directory.\n" +
			"A directory travels as a tar.gz. Coming out, an entry whose name or link would lead outside\n" +
			"DST, a device, a FIFO or a setuid bit refuses the whole archive, nothing written; going in,\n" +
			"the server refuses the same. A directory to `-` writes its tar.gz to stdout.",
		Flags:  clientFlags(),
		Action: runCp,
	}
}

// end is one side of a copy: a sandbox's path, or a local one (id "").
type end struct {
	id, path string
}

func (e end) String() string {
	if e.id == "" {
		return e.path
	}
	return e.id + ":" + e.path
}

func parseEnd(arg string) end {
	if id, p, ok := parseRemote(arg); ok {
		return end{id: id, path: p}
	}
	return end{path: arg}
}

// copier runs one copy.
type copier struct {
	ctx  context.Context
	api  *apiClient
	in   io.Reader
	out  io.Writer
	errw io.Writer
}

func runCp(c *cli.Context) error {
	args, err := positional(c, 2, 2)
	if err != nil {
		return err
	}
	src, dst := parseEnd(args[0]), parseEnd(args[1])
	if src.id == "" && dst.id == "" {
		return usagef("neither %q nor %q is a sandbox's path; name one as SANDBOX_ID:PATH (e.g. c_…:notes.txt)", args[0], args[1])
	}
	if src.path == "-" && src.id == "" && dst.path == "-" {
		return usagef("`-` may stand for one side only")
	}
	api, err := newAPIClient(c)
	if err != nil {
		return err
	}
	ctx, stop := signalContext(c.Context)
	defer stop()
	cp := &copier{ctx: ctx, api: api, in: c.App.Reader, out: c.App.Writer, errw: c.App.ErrWriter}
	switch {
	case dst.id == "":
		return cp.download(src, dst)
	case src.id == "":
		return cp.upload(src, dst)
	}
	return cp.between(src, dst)
}

// contentsOf reports whether a source directory's contents are copied
// rather than the directory: SRC/. or a workspace root.
func contentsOf(p string, remote bool) bool {
	if strings.HasSuffix(p, "/.") || p == "." {
		return true
	}
	return remote && strings.Trim(p, "/") == ""
}

// baseName is the name a copied file or directory keeps.
func baseName(p string) string {
	return path.Base(strings.TrimRight(filepath.ToSlash(p), "/"))
}

// download copies a sandbox's file or directory to a local path.
func (cp *copier) download(src, dst end) error {
	body, e, err := cp.api.ReadFile(cp.ctx, src.id, src.path)
	if errors.Is(err, client.ErrIsDirectory) {
		return cp.downloadDir(src, dst)
	}
	if err != nil {
		return describeFiles(cp.api, err, src.id, src.path)
	}
	defer body.Close()
	if dst.path == "-" {
		_, err := io.Copy(cp.out, body)
		return err
	}
	target, err := localFileTarget(dst.path, baseName(e.Path))
	if err != nil {
		return err
	}
	n, err := writeLocalFile(target, body)
	if err != nil {
		return err
	}
	fmt.Fprintf(cp.errw, "copied %s to %s (%s)\n", src, target, sizeText(n))
	return nil
}

// localFileTarget is where a file named base goes for the local DST.
func localFileTarget(dst, base string) (string, error) {
	fi, err := os.Stat(dst)
	switch {
	case err == nil && fi.IsDir():
		return filepath.Join(dst, base), nil
	case err == nil:
		return dst, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", err
	case strings.HasSuffix(dst, "/"):
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return "", err
		}
		return filepath.Join(dst, base), nil
	}
	if fi, err := os.Stat(filepath.Dir(dst)); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("cannot write %s: the directory %s does not exist", dst, filepath.Dir(dst))
	}
	return dst, nil
}

// writeLocalFile writes r to the local file p atomically, as the server
// writes the workspace's: a temporary file beside it, renamed over it.
func writeLocalFile(p string, r io.Reader) (int64, error) {
	mode := fs.FileMode(0o644)
	if fi, err := os.Stat(p); err == nil {
		if fi.IsDir() {
			return 0, fmt.Errorf("cannot write %s: it is a directory", p)
		}
		mode = fi.Mode().Perm()
	}
	f, err := os.CreateTemp(filepath.Dir(p), ".sparkles-cp-*")
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(f, r)
	if err == nil {
		err = f.Chmod(mode)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), p)
	}
	if err != nil {
		os.Remove(f.Name())
		return 0, fmt.Errorf("write %s: %w", p, err)
	}
	return n, nil
}

// downloadDir copies a sandbox's directory to a local one through its
// tar.gz, unpacked by the same code that unpacks uploads on the server:
// whatever the archive says, nothing lands outside the target.
func (cp *copier) downloadDir(src, dst end) (err error) {
	if dst.path == "-" {
		body, err := cp.api.Archive(cp.ctx, src.id, src.path)
		if err != nil {
			return describeFiles(cp.api, err, src.id, src.path)
		}
		defer body.Close()
		_, err = io.Copy(cp.out, body)
		return err
	}
	target := dst.path
	fi, err := os.Stat(dst.path)
	switch {
	case err == nil && !fi.IsDir():
		return fmt.Errorf("cannot copy the directory %s to %s: it is a file", src, dst.path)
	case err == nil && !contentsOf(src.path, true):
		target = filepath.Join(dst.path, baseName(src.path))
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return err
	}
	// An empty directory makes an archive without entries, which no
	// unpack takes.
	page, err := cp.api.Files(cp.ctx, src.id, src.path, client.ListFilesOptions{Limit: 1})
	if err != nil {
		return describeFiles(cp.api, err, src.id, src.path)
	}
	undo, err := mkdirs(target)
	if err != nil {
		return err
	}
	// A refused archive leaves nothing behind, not even its directory.
	defer func() {
		if err != nil {
			undo()
		}
	}()
	var sum sandbox.ArchiveSummary
	if len(page.Data) > 0 {
		body, err := cp.api.Archive(cp.ctx, src.id, src.path)
		if err != nil {
			return describeFiles(cp.api, err, src.id, src.path)
		}
		defer body.Close()
		ws, err := workspace.Open(target, workspace.Options{Limits: localLimits})
		if err != nil {
			return err
		}
		defer ws.Close()
		if sum, err = ws.Unpack(body, "."); err != nil {
			return localUnpackError(err, target)
		}
	}
	fmt.Fprintf(cp.errw, "copied %s to %s (%s)\n", src, target, entriesText(sum.Entries, sum.Bytes))
	return nil
}

// mkdirs makes the directory dir and its missing parents; undo removes
// those it made, if still empty.
func mkdirs(dir string) (undo func(), err error) {
	var made []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); !errors.Is(err, fs.ErrNotExist) {
			break
		}
		made = append(made, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return func() {
		for _, d := range made {
			os.Remove(d)
		}
	}, nil
}

// localLimits bound nothing the local disk does not: the server has
// limited the workspace already, and the person asked for all of it.
var localLimits = workspace.Limits{FileMax: math.MaxInt64, ArchiveMax: math.MaxInt64, ArchiveEntries: math.MaxInt}

// localUnpackError says what refused an archive unpacked locally, in
// the words of the local side.
func localUnpackError(err error, target string) error {
	var e *sandbox.Error
	if errors.As(err, &e) {
		return fmt.Errorf("%s (into %s)", strings.Replace(e.Message, "the workspace", "the directory", 1), target)
	}
	return err
}

// upload copies a local file or directory, or stdin, into a sandbox.
func (cp *copier) upload(src, dst end) error {
	if src.path == "-" {
		if p := strings.Trim(dst.path, "/"); p == "" || strings.HasSuffix(dst.path, "/") {
			return usagef("name the file that stdin goes to: %s:PATH/NAME", dst.id)
		}
		e, err := cp.api.WriteFile(cp.ctx, dst.id, dst.path, cp.in, client.WriteFileOptions{})
		if err != nil {
			return describeFiles(cp.api, err, dst.id, dst.path)
		}
		fmt.Fprintf(cp.errw, "copied stdin to %s:%s (%s)\n", dst.id, e.Path, sizeText(e.Size))
		return nil
	}
	fi, err := os.Stat(src.path)
	if err != nil {
		return fmt.Errorf("cannot copy %s: %w", src.path, unwrapPathError(err))
	}
	if fi.IsDir() {
		return cp.uploadDir(src, dst)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("cannot copy %s: it is not a regular file", src.path)
	}
	target, err := cp.remoteFileTarget(dst, baseName(src.path))
	if err != nil {
		return err
	}
	f, err := os.Open(src.path)
	if err != nil {
		return err
	}
	defer f.Close()
	e, err := cp.api.WriteFile(cp.ctx, dst.id, target, f, client.WriteFileOptions{})
	if err != nil {
		return describeFiles(cp.api, err, dst.id, target)
	}
	fmt.Fprintf(cp.errw, "copied %s to %s:%s (%s)\n", src.path, dst.id, e.Path, sizeText(e.Size))
	return nil
}

// remoteFileTarget is where a file named base goes for the sandbox's DST.
func (cp *copier) remoteFileTarget(dst end, base string) (string, error) {
	p := strings.Trim(dst.path, "/")
	if p == "" || strings.HasSuffix(dst.path, "/") {
		return path.Join(p, base), nil
	}
	e, err := cp.api.StatFile(cp.ctx, dst.id, p)
	switch {
	case err == nil && e.Type == client.EntryDir:
		return path.Join(p, base), nil
	case err == nil, client.IsType(err, sandbox.ENotFound) && !isSandboxMissing(err):
		return p, nil
	}
	return "", describeFiles(cp.api, err, dst.id, p)
}

// remoteDirTarget is where a directory named base goes for the sandbox's
// DST: into it when it is a directory, else it becomes DST.
func (cp *copier) remoteDirTarget(src string, dst end, base string) (string, error) {
	p := strings.Trim(dst.path, "/")
	e, err := cp.api.StatFile(cp.ctx, dst.id, p)
	switch {
	case err == nil && e.Type != client.EntryDir:
		return "", fmt.Errorf("cannot copy the directory %s to %s: it is a file", src, dst)
	case err == nil && contentsOf(src, false):
		return p, nil
	case err == nil:
		return path.Join(p, base), nil
	case client.IsType(err, sandbox.ENotFound) && !isSandboxMissing(err):
		return p, nil
	}
	return "", describeFiles(cp.api, err, dst.id, p)
}

// isSandboxMissing tells a missing sandbox from a missing file, both
// not_found.
func isSandboxMissing(err error) bool {
	var e *client.Error
	return errors.As(err, &e) && strings.HasPrefix(e.Message, "sandbox ")
}

// uploadDir sends a local directory as a tar.gz made as it is sent:
// files, directories and symbolic links as they are (a link that leads
// out of the directory makes the server refuse the whole archive).
func (cp *copier) uploadDir(src, dst end) error {
	target, err := cp.remoteDirTarget(src.path, dst, baseName(src.path))
	if err != nil {
		return err
	}
	ws, err := workspace.Open(src.path, workspace.Options{})
	if err != nil {
		return err
	}
	defer ws.Close()
	empty, err := isEmptyDir(src.path)
	if err != nil {
		return err
	}
	type archived struct {
		sum sandbox.ArchiveSummary
		err error
	}
	pr, pw := io.Pipe()
	done := make(chan archived, 1)
	go func() {
		if empty {
			_, err := pw.Write(emptyTarGz())
			pw.CloseWithError(err)
			done <- archived{err: err}
			return
		}
		sum, err := ws.Archive(pw, ".")
		pw.CloseWithError(err)
		done <- archived{sum, err}
	}()
	sum, err := cp.api.Unpack(cp.ctx, dst.id, target, pr)
	// The request may have ended before the archive did (a refusal).
	pr.CloseWithError(errUploadEnded)
	made := <-done
	if err != nil && made.err != nil && !errors.Is(made.err, errUploadEnded) {
		var e *sandbox.Error
		if errors.As(made.err, &e) {
			return fmt.Errorf("cannot send %s: %s", src.path, e.Message)
		}
		return fmt.Errorf("cannot send %s: %w", src.path, made.err)
	}
	if err != nil {
		return describeFiles(cp.api, err, dst.id, target)
	}
	for _, s := range made.sum.Skipped {
		fmt.Fprintf(cp.errw, "sparkles: left out %s: %s\n", filepath.Join(src.path, s.Path), s.Reason)
	}
	fmt.Fprintf(cp.errw, "copied %s to %s:%s (%s)\n", src.path, dst.id, target, entriesText(sum.Entries, sum.Bytes))
	return nil
}

var errUploadEnded = errors.New("the upload ended")

func isEmptyDir(dir string) (bool, error) {
	f, err := os.Open(dir)
	if err != nil {
		return false, err
	}
	defer f.Close()
	names, err := f.Readdirnames(1)
	if errors.Is(err, io.EOF) {
		return true, nil
	}
	return len(names) == 0, err
}

// emptyTarGz is an archive of an empty directory: one entry, the
// directory itself, so that the unpack makes it.
func emptyTarGz() []byte {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	tw := tar.NewWriter(zw)
	_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "./", Mode: 0o755})
	_ = tw.Close()
	_ = zw.Close()
	return b.Bytes()
}

// between copies from one sandbox to another (or within one), streamed
// through this process.
func (cp *copier) between(src, dst end) error {
	body, _, err := cp.api.ReadFile(cp.ctx, src.id, src.path)
	if errors.Is(err, client.ErrIsDirectory) {
		return cp.betweenDirs(src, dst)
	}
	if err != nil {
		return describeFiles(cp.api, err, src.id, src.path)
	}
	defer body.Close()
	target, err := cp.remoteFileTarget(dst, baseName(src.path))
	if err != nil {
		return err
	}
	e, err := cp.api.WriteFile(cp.ctx, dst.id, target, body, client.WriteFileOptions{})
	if err != nil {
		return describeFiles(cp.api, err, dst.id, target)
	}
	fmt.Fprintf(cp.errw, "copied %s to %s:%s (%s)\n", src, dst.id, e.Path, sizeText(e.Size))
	return nil
}

func (cp *copier) betweenDirs(src, dst end) error {
	target, err := cp.remoteDirTarget(src.path, dst, baseName(src.path))
	if err != nil {
		return err
	}
	page, err := cp.api.Files(cp.ctx, src.id, src.path, client.ListFilesOptions{Limit: 1})
	if err != nil {
		return describeFiles(cp.api, err, src.id, src.path)
	}
	var body io.ReadCloser = io.NopCloser(bytes.NewReader(emptyTarGz()))
	if len(page.Data) > 0 {
		if body, err = cp.api.Archive(cp.ctx, src.id, src.path); err != nil {
			return describeFiles(cp.api, err, src.id, src.path)
		}
	}
	defer body.Close()
	sum, err := cp.api.Unpack(cp.ctx, dst.id, target, body)
	if err != nil {
		return describeFiles(cp.api, err, dst.id, target)
	}
	fmt.Fprintf(cp.errw, "copied %s to %s:%s (%s)\n", src, dst.id, target, entriesText(sum.Entries, sum.Bytes))
	return nil
}

func unwrapPathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// sizeText writes n bytes for people.
func sizeText(n int64) string {
	const unit = 1024
	if n < unit {
		if n == 1 {
			return "1 byte"
		}
		return fmt.Sprintf("%d bytes", n)
	}
	f, units := float64(n)/unit, "KiB"
	for _, u := range []string{"MiB", "GiB", "TiB"} {
		if f < unit {
			break
		}
		f, units = f/unit, u
	}
	return fmt.Sprintf("%.1f %s", f, units)
}

func entriesText(entries int, bytes int64) string {
	noun := "entries"
	if entries == 1 {
		noun = "entry"
	}
	return fmt.Sprintf("%d %s, %s", entries, noun, sizeText(bytes))
}
