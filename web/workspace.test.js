// Unit tests of the console's workspace parts that need no page: reading
// a turn's diff, the words of its changes, sizes, telling text from
// binary, the files route of a path, a preview cut short, and the reverts
// read from the end of a log. Run with `node --test web/` (TestNodeUnits
// runs them from go test).
import assert from "node:assert/strict";
import { test } from "node:test";

import { filesURL } from "./api.js";
import { changeWords, parseDiff, revertsAfter, unquote } from "./changes.js";
import { baseName, dirName, formatSize, joinPath, looksText, readPreview } from "./files.js";

// A diff as the server writes it (go-git's unified encoder, git's format).
const DIFF = [
  "diff --git a/bin.dat b/bin.dat",
  "index 1111111..2222222 100644",
  "Binary files a/bin.dat and b/bin.dat differ",
  "diff --git a/dir x/new file.txt b/dir x/new file.txt",
  "new file mode 100644",
  "index 0000000..3333333",
  "--- /dev/null",
  "+++ b/dir x/new file.txt",
  "@@ -0,0 +1,2 @@",
  "+hello",
  "+world",
  "diff --git a/edit.txt b/edit.txt",
  "index 4444444..5555555 100644",
  "--- a/edit.txt",
  "+++ b/edit.txt",
  "@@ -1,3 +1,3 @@",
  " one",
  "-two",
  "+2",
  " three",
  "@@ -10,2 +10,2 @@ func x() {",
  "-a",
  "+b",
  "\\ No newline at end of file",
  "diff --git a/gone.txt b/gone.txt",
  "deleted file mode 100644",
  "--- a/gone.txt",
  "+++ /dev/null",
  "@@ -1 +0,0 @@",
  "-to be deleted",
  "diff --git a/run.sh b/run.sh",
  "old mode 100644",
  "new mode 100755",
  "diff --git a/big.iso b/big.iso",
  "File big.iso not stored (too large: 104857601 bytes after), not diffed",
  "",
].join("\n");

test("parseDiff: each file with its change, its lines and its counts", () => {
  const files = parseDiff(DIFF);
  assert.deepEqual(
    files.map((f) => [f.path, f.change, f.binary, f.added, f.removed, f.hunks.length]),
    [
      ["bin.dat", "modified", true, 0, 0, 0],
      ["dir x/new file.txt", "added", false, 2, 0, 1],
      ["edit.txt", "modified", false, 2, 2, 2],
      ["gone.txt", "deleted", false, 0, 1, 1],
      ["run.sh", "modified", false, 0, 0, 0],
      ["big.iso", "modified", false, 0, 0, 0],
    ],
  );
  const edit = files[2];
  assert.equal(edit.hunks[1].header, "@@ -10,2 +10,2 @@ func x() {");
  assert.deepEqual(
    edit.hunks[0].lines.map((l) => l.kind),
    ["ctx", "del", "add", "ctx"],
  );
  assert.deepEqual(edit.hunks[1].lines.at(-1), { kind: "note", text: "\\ No newline at end of file" });
  assert.equal(files[5].note, "File big.iso not stored (too large: 104857601 bytes after), not diffed");
});

test("parseDiff: lines that look like headers inside a hunk are lines", () => {
  const files = parseDiff("diff --git a/x.md b/x.md\n--- a/x.md\n+++ b/x.md\n@@ -1 +1,2 @@\n--- a/not-a-file\n++++ b/nor-this\n");
  assert.equal(files.length, 1);
  assert.equal(files[0].path, "x.md");
  assert.deepEqual([files[0].added, files[0].removed], [1, 1]);
});

test("parseDiff: a new binary file, a quoted name, a rename, nothing", () => {
  const [bin] = parseDiff("diff --git a/logo.png b/logo.png\nnew file mode 100644\nBinary files /dev/null and b/logo.png differ\n");
  assert.deepEqual([bin.path, bin.change, bin.binary], ["logo.png", "added", true]);
  const [quoted] = parseDiff('diff --git "a/caf\\303\\251 \\"x\\".txt" "b/caf\\303\\251 \\"x\\".txt"\n--- "a/caf\\303\\251 \\"x\\".txt"\n+++ "b/caf\\303\\251 \\"x\\".txt"\n@@ -1 +1 @@\n-a\n+b\n');
  assert.equal(quoted.path, 'café "x".txt');
  const [moved] = parseDiff("diff --git a/old.txt b/new.txt\nsimilarity index 100%\nrename from old.txt\nrename to new.txt\n");
  assert.deepEqual([moved.from, moved.path, moved.change], ["old.txt", "new.txt", "renamed"]);
  assert.deepEqual(parseDiff(""), []);
  assert.deepEqual(parseDiff("\r\n"), []);
});

test("unquote: git's C escapes and octal UTF-8", () => {
  assert.equal(unquote("plain.txt"), "plain.txt");
  assert.equal(unquote('"tab\\there\\n"'), "tab\there\n");
  assert.equal(unquote('"\\346\\227\\245.md"'), "日.md");
});

test("changeWords: what a turn changed, in words", () => {
  assert.equal(changeWords({ added: 1, modified: 0, deleted: 0, files: [], truncated: false }), "1 file changed: 1 added");
  assert.equal(changeWords({ added: 1, modified: 2, deleted: 3, files: [], truncated: false }), "6 files changed: 1 added, 2 modified, 3 deleted");
  assert.equal(changeWords({ added: 0, modified: 0, deleted: 0, files: [], truncated: false }), "No files changed");
});

test("formatSize: bytes as people read them", () => {
  assert.deepEqual(
    [0, 1, 1023, 1024, 1536, 10 * 1024, 5 * 1024 * 1024 + 1, 3 * 1024 ** 4].map(formatSize),
    ["0 B", "1 B", "1023 B", "1.0 KiB", "1.5 KiB", "10 KiB", "5.0 MiB", "3.0 TiB"],
  );
  assert.equal(formatSize(-1), "");
  assert.equal(formatSize(NaN), "");
});

test("looksText: the type decides, else the bytes do", () => {
  const utf8 = new TextEncoder().encode("héllo, wörld\n");
  assert.equal(looksText("text/plain; charset=utf-8", new Uint8Array([0, 1, 2])), true);
  assert.equal(looksText("application/json", utf8), true);
  assert.equal(looksText("image/svg+xml", utf8), true);
  assert.equal(looksText("image/png", utf8), false);
  assert.equal(looksText("application/octet-stream", utf8), true);
  assert.equal(looksText("", utf8), true);
  assert.equal(looksText("application/octet-stream", new Uint8Array([104, 0, 105])), false);
  assert.equal(looksText("application/octet-stream", new Uint8Array([0xff, 0xfe, 0x41])), false);
  // A preview that cuts a character in two is still text.
  assert.equal(looksText("application/octet-stream", utf8.subarray(0, 2)), true);
});

test("paths: join, base and directory names", () => {
  assert.equal(joinPath("", "a.txt"), "a.txt");
  assert.equal(joinPath("dir/sub", "a.txt"), "dir/sub/a.txt");
  assert.equal(baseName("dir/sub/a.txt"), "a.txt");
  assert.equal(baseName("a.txt"), "a.txt");
  assert.equal(dirName("dir/sub/a.txt"), "dir/sub");
  assert.equal(dirName("a.txt"), "");
});

test("filesURL: each segment escaped, slashes kept", () => {
  assert.equal(filesURL("c_1", ""), "/v1/sandboxes/c_1/files");
  assert.equal(filesURL("c_1", "dir x/a#b?.txt"), "/v1/sandboxes/c_1/files/dir%20x/a%23b%3F.txt");
  assert.equal(filesURL("c_1", "/a//b/"), "/v1/sandboxes/c_1/files/a/b");
});

test("readPreview: stops reading at the bound and says the file is longer", async () => {
  let pulled = 0;
  const body = new ReadableStream({
    pull(c) {
      pulled++;
      c.enqueue(new Uint8Array(1000).fill(97));
    },
  });
  const resp = new Response(body, { headers: { "Content-Length": "1000000" } });
  const got = await readPreview(resp, 2500);
  assert.equal(got.bytes.length, 2500);
  assert.equal(got.total, 1000000);
  assert.equal(got.complete, false);
  assert.ok(pulled <= 4, `read ${pulled} chunks for 2500 bytes`);

  const small = await readPreview(new Response("hello"), 2500);
  assert.equal(new TextDecoder().decode(small.bytes), "hello");
  assert.equal(small.complete, true);
  const empty = await readPreview(new Response(null), 2500);
  assert.deepEqual([empty.bytes.length, empty.complete], [0, true]);
});

test("revertsAfter: the reverts since the turn's last event, from the log's end", async () => {
  const log = [
    { id: "1", type: "turn.started", turn_id: "turn_a" },
    { id: "2", type: "turn.completed", turn_id: "turn_a" },
    { id: "3", type: "workspace.reverted", turn_id: null, data: { turn_id: "turn_a" } },
    { id: "4", type: "turn.started", turn_id: "turn_b" },
    { id: "5", type: "turn.completed", turn_id: "turn_b" },
    { id: "6", type: "workspace.reverted", turn_id: null, data: { turn_id: "turn_b" } },
    { id: "7", type: "workspace.reverted", turn_id: null, data: { turn_id: "turn_a" } },
    { id: "8", type: "turn.started", turn_id: "turn_c" },
  ];
  const api = {
    async events(_id, since, limit) {
      const after = log.filter((e) => BigInt(e.id) > BigInt(since));
      const data = after.slice(0, limit);
      return { data, has_more: after.length > limit, next_since: data.at(-1)?.id ?? since };
    },
  };
  // Up to the snapshot's last event (7): the two after turn_b's end.
  assert.deepEqual(
    (await revertsAfter(api, "c_1", "turn_b", { last: "7" })).map((e) => e.id),
    ["6", "7"],
  );
  assert.deepEqual(await revertsAfter(api, "c_1", "turn_c", { last: "8" }), []);
  // A window that starts after the turn's events still finds them.
  assert.deepEqual(
    (await revertsAfter(api, "c_1", "turn_b", { last: "7", window: 2n })).map((e) => e.id),
    ["6", "7"],
  );
});
