package app

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/sparkles-dev/sparkles/internal/datadir"
)

// The data dir before anything opens in it: writable, private to the
// server user, and the token kept there.

func checkWritable(dir string) error {
	f, err := os.CreateTemp(dir, ".write-check-*")
	if err != nil {
		return fmt.Errorf("data dir %s is not writable (%v); pass a writable --data-dir", dir, UnwrapPath(err))
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

// UnwrapPath is the error of a path error without its path, for messages
// that name the path themselves.
func UnwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// tighten takes from path every permission beyond want (the data dir
// 0700, the token 0600), as it was made: anything looser lets another local
// user read the token or the database. It says so, since what was readable
// may have been read.
func (m *Main) tighten(path string, want fs.FileMode) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("cannot stat %s (%v)", path, UnwrapPath(err))
	}
	if fi.Mode().Perm()&^want == 0 {
		return nil
	}
	if err := os.Chmod(path, fi.Mode().Perm()&want); err != nil {
		return fmt.Errorf("%s has mode %04o, readable by other users, and cannot be made %04o (%v); fix its permissions", path, fi.Mode().Perm(), want, UnwrapPath(err))
	}
	// A directory made by hand (or by mktemp -d, or a test's TempDir) is
	// 0755 as a matter of course; a token file readable by others is news.
	log := m.Logger.Debug
	if !fi.IsDir() {
		log = m.Logger.Warn
	}
	log("permissions were looser than the server makes them: tightened; rotate the token if other users could read it",
		"path", path, "was", fmt.Sprintf("%04o", fi.Mode().Perm()), "now", fmt.Sprintf("%04o", fi.Mode().Perm()&want))
	return nil
}

// loadToken returns the token to use: the given one, else the one kept in
// <dataDir>/token, else a new one written there with mode 0600. The path is
// returned when the token came from (or went to) the file.
func loadToken(dataDir, given string) (token, path string, err error) {
	if given != "" {
		return given, "", nil
	}
	path = datadir.Dir(dataDir).Token()
	b, err := os.ReadFile(path)
	if err == nil {
		if t := strings.TrimSpace(string(b)); t != "" {
			return t, path, nil
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", "", fmt.Errorf("cannot read token file %s (%v); fix its permissions or pass --token", path, UnwrapPath(err))
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", "", err
	}
	token = "spk_" + base64.RawURLEncoding.EncodeToString(raw)
	if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
		return "", "", fmt.Errorf("cannot write token file %s (%v); pass a writable --data-dir or --token", path, UnwrapPath(err))
	}
	return token, path, nil
}
