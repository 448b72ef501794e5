// changes.js shows what a finished turn changed in the workspace: the
// files of turn.completed's changes, each with its kind of change, the
// turn's unified diff on demand (with +N/-N per file once it is read), and
// the way to put the workspace back as it was when the turn started.
//
// File names, diff lines and everything else of the workspace are the
// agent's: they go into the page as textContent only.
import { h } from "./dom.js";

// MAX_DIFF_LINES bounds the lines of one diff the page draws: past it the
// page would crawl, and a person reads such a diff with `sparkles diff`.
const MAX_DIFF_LINES = 5000;

const KIND_MARK = { added: "A", modified: "M", deleted: "D" };

// changeWords sums up a turn's changes in words: "2 files changed: 1
// added, 1 modified", or "No files changed".
export function changeWords(c) {
  const total = (c?.added ?? 0) + (c?.modified ?? 0) + (c?.deleted ?? 0);
  if (total === 0) {
    return "No files changed";
  }
  const parts = [
    [c.added, "added"],
    [c.modified, "modified"],
    [c.deleted, "deleted"],
  ]
    .filter(([n]) => n > 0)
    .map(([n, w]) => `${n} ${w}`);
  return `${total} ${total === 1 ? "file" : "files"} changed: ${parts.join(", ")}`;
}

// unquote reads a path as git writes one with unusual bytes: in double
// quotes, with C escapes and octal bytes (UTF-8).
export function unquote(s) {
  if (!s.startsWith('"') || !s.endsWith('"') || s.length < 2) {
    return s;
  }
  const bytes = [];
  const enc = new TextEncoder();
  const simple = { n: 10, t: 9, r: 13, a: 7, b: 8, f: 12, v: 11, "\\": 92, '"': 34 };
  const body = s.slice(1, -1);
  for (let i = 0; i < body.length; i++) {
    const ch = body[i];
    if (ch !== "\\" || i + 1 >= body.length) {
      bytes.push(...enc.encode(ch));
      continue;
    }
    const next = body[i + 1];
    if (/[0-7]/.test(next)) {
      const oct = /^[0-7]{1,3}/.exec(body.slice(i + 1))[0];
      bytes.push(parseInt(oct, 8) & 0xff);
      i += oct.length;
    } else {
      bytes.push(simple[next] ?? next.charCodeAt(0));
      i += 1;
    }
  }
  return new TextDecoder().decode(new Uint8Array(bytes));
}

// sidePath is the path of a ---/+++ line's side ("a/x", "b/x", a quoted
// name, or /dev/null for none).
function sidePath(s) {
  const p = unquote(s.replace(/\t.*$/, ""));
  if (p === "/dev/null") {
    return null;
  }
  return p.startsWith("a/") || p.startsWith("b/") ? p.slice(2) : p;
}

// headerPath reads the path of a "diff --git a/X b/X" line's rest. The
// two sides name the same path unless the file moved; a path with spaces
// is told apart by the two halves being equal.
function headerPath(rest) {
  if (rest.startsWith('"')) {
    const m = /^("(?:[^"\\]|\\.)*")\s+(.*)$/.exec(rest);
    return m ? sidePath(m[2]) ?? sidePath(m[1]) : rest;
  }
  const n = (rest.length - 5) / 2;
  if (Number.isInteger(n) && n > 0 && rest.startsWith("a/") && rest.slice(2, 2 + n) === rest.slice(5 + n) && rest.slice(2 + n, 5 + n) === " b/") {
    return rest.slice(2, 2 + n);
  }
  const b = rest.lastIndexOf(" b/");
  return b > 0 ? rest.slice(b + 3) : rest;
}

// parseDiff reads a unified diff in git's format into its files:
// {path, from, change: "added"|"modified"|"deleted"|"renamed", binary,
// note, added, removed, hunks: [{header, lines: [{kind, text}]}]}, a line
// kind being "add", "del", "ctx" or "note" ("\ No newline at end of file").
export function parseDiff(text) {
  const files = [];
  let f = null;
  let hunk = null;
  const lines = String(text ?? "").split("\n");
  if (lines.at(-1) === "") {
    lines.pop();
  }
  for (const raw of lines) {
    const line = raw.endsWith("\r") ? raw.slice(0, -1) : raw;
    if (line.startsWith("diff --git ")) {
      f = { path: headerPath(line.slice(11)), from: null, change: "modified", binary: false, note: "", added: 0, removed: 0, hunks: [] };
      files.push(f);
      hunk = null;
      continue;
    }
    if (!f) {
      continue; // git writes nothing before the first file
    }
    if (line.startsWith("@@")) {
      hunk = { header: line, lines: [] };
      f.hunks.push(hunk);
      continue;
    }
    if (hunk) {
      const kind = { "+": "add", "-": "del", "\\": "note" }[line[0]] ?? "ctx";
      if (kind === "add") {
        f.added++;
      } else if (kind === "del") {
        f.removed++;
      }
      hunk.lines.push({ kind, text: line });
      continue;
    }
    if (line.startsWith("new file mode")) {
      f.change = "added";
    } else if (line.startsWith("deleted file mode")) {
      f.change = "deleted";
    } else if (line.startsWith("rename from ")) {
      f.from = unquote(line.slice(12));
      f.change = "renamed";
    } else if (line.startsWith("rename to ")) {
      f.path = unquote(line.slice(10));
    } else if (line.startsWith("--- ")) {
      const p = sidePath(line.slice(4));
      if (p === null) {
        f.change = "added";
      } else if (f.change !== "renamed") {
        f.path = p;
      }
    } else if (line.startsWith("+++ ")) {
      const p = sidePath(line.slice(4));
      if (p === null) {
        f.change = "deleted";
      } else {
        f.path = p;
      }
    } else if (line.startsWith("Binary files ")) {
      f.binary = true;
      const m = /^Binary files (.*) and (.*) differ$/.exec(line);
      if (m?.[1] === "/dev/null") {
        f.change = "added";
      } else if (m?.[2] === "/dev/null") {
        f.change = "deleted";
      }
    } else if (!/^(index |old mode |new mode |similarity index |dissimilarity index |copy from |copy to )/.test(line)) {
      // What the server says instead of a diff (a file too large to keep).
      f.note = f.note ? `${f.note}\n${line}` : line;
    }
  }
  return files;
}

// revertedLine is the transcript's line of a workspace.reverted event;
// prompt is the reverted turn's, when the page shows that turn.
export function revertedLine(env, prompt) {
  const first = prompt.trim().split("\n")[0];
  const cut = first.length > 80 ? first.slice(0, 79) + "…" : first;
  const what = first ? `as it was before “${cut}”` : `as it was before turn ${env.data?.turn_id}`;
  return h(
    "li",
    { class: "reverted", "data-event-id": env.id, "data-turn-id": env.data?.turn_id ?? "" },
    h("span", { class: "reverted-head", text: "Workspace reverted" }),
    h("span", { class: "reverted-what", text: what }),
  );
}

// TurnChanges is the block of a finished turn that says what it changed.
//
// hooks: diff(turnID) returns a promise of the turn's diff text;
// revert(turnID) asks to put the workspace back as it was when the turn
// started; open(path) shows a file of the workspace.
export class TurnChanges {
  #turnID;
  #hooks;
  #changes = null;
  #summary;
  #files;
  #diffButton;
  #revertButton;
  #diff;
  #diffStatus;
  #reverted;
  #loading = null;

  constructor(turnID, hooks) {
    this.#turnID = turnID;
    this.#hooks = hooks;
    const diffID = `diff-${turnID}`;
    this.#summary = h("span", { class: "changes-summary" });
    this.#reverted = h("span", { class: "badge status-reverted", text: "reverted", hidden: true });
    this.#diffButton = h("button", {
      type: "button",
      class: "ghost changes-diff",
      text: "Show diff",
      "aria-expanded": "false",
      "aria-controls": diffID,
    });
    this.#revertButton = h("button", { type: "button", class: "ghost danger changes-revert", text: "Revert" });
    this.#revertButton.title = "Put the workspace back as it was when this turn started";
    this.#files = h("ul", { class: "changed-files", "aria-label": "Changed files" });
    this.#diffStatus = h("p", { class: "diff-status", role: "status" });
    this.#diff = h("div", { class: "diff", id: diffID, hidden: true }, this.#diffStatus);
    this.el = h(
      "section",
      { class: "changes", hidden: true, "aria-label": "What this turn changed" },
      h(
        "div",
        { class: "changes-head" },
        this.#summary,
        this.#reverted,
        h("span", { class: "changes-actions" }, this.#diffButton, this.#revertButton),
      ),
      this.#files,
      this.#diff,
    );
    this.#diffButton.addEventListener("click", () => this.#toggleDiff());
    this.#revertButton.addEventListener("click", () => this.#hooks.revert(this.#turnID));
  }

  // set shows changes (turn.completed's data.changes); null means they
  // were not recorded, and the block stays hidden.
  set(changes) {
    if (changes === undefined || JSON.stringify(changes) === JSON.stringify(this.#changes)) {
      return;
    }
    this.#changes = changes;
    this.el.hidden = changes === null;
    if (changes === null) {
      return;
    }
    this.#summary.textContent = changeWords(changes);
    const items = (changes.files ?? []).map((f) => this.#fileItem(f));
    const total = changes.added + changes.modified + changes.deleted;
    const more = total - (changes.files?.length ?? 0);
    if (changes.truncated && more > 0) {
      items.push(h("li", { class: "changed-more", text: `and ${more} more ${more === 1 ? "file" : "files"}` }));
    }
    this.#files.replaceChildren(...items);
    this.#files.hidden = items.length === 0;
    this.#diffButton.hidden = total === 0;
  }

  #fileItem(f) {
    const gone = f.change === "deleted";
    const name = gone ? h("code", { class: "changed-path", text: f.path }) : h("button", { type: "button", class: "link changed-path", text: f.path });
    if (!gone) {
      name.setAttribute("aria-label", `Open ${f.path}`);
      name.addEventListener("click", () => this.#hooks.open(f.path));
    }
    return h(
      "li",
      { class: "changed", "data-change": f.change, "data-path": f.path },
      h(
        "span",
        { class: "change-kind", title: f.change },
        h("span", { "aria-hidden": "true", text: KIND_MARK[f.change] ?? "?" }),
        h("span", { class: "visually-hidden", text: f.change }),
      ),
      name,
      h("span", { class: "changed-lines" }),
    );
  }

  // setRevertable enables Revert: not while a turn runs, nor while the
  // page cannot reach the server.
  setRevertable(ok) {
    this.#revertButton.disabled = !ok;
  }

  // markReverted says that the workspace was put back to this turn's start.
  markReverted() {
    this.#reverted.hidden = false;
  }

  async #toggleDiff() {
    const open = this.#diff.hidden;
    this.#diff.hidden = !open;
    this.#diffButton.setAttribute("aria-expanded", String(open));
    this.#diffButton.textContent = open ? "Hide diff" : "Show diff";
    if (open && !this.#loading) {
      this.#loading = this.#loadDiff();
    }
  }

  async #loadDiff() {
    this.#diffStatus.textContent = "Loading the diff…";
    this.#diff.dataset.state = "loading";
    let text;
    try {
      text = await this.#hooks.diff(this.#turnID);
    } catch (e) {
      this.#diffStatus.textContent = `Could not load the diff: ${e.message}`;
      this.#diff.dataset.state = "error";
      this.#loading = null; // the next click tries again
      return;
    }
    const files = parseDiff(text);
    this.#diffStatus.textContent = files.length === 0 ? "The diff is empty: the files are as they were." : "";
    this.#diff.replaceChildren(this.#diffStatus, ...renderDiff(files));
    this.#diff.dataset.state = "loaded";
    const byPath = new Map(files.map((f) => [f.path, f]));
    for (const li of this.#files.querySelectorAll(".changed")) {
      const f = byPath.get(li.dataset.path);
      if (f) {
        li.querySelector(".changed-lines").replaceChildren(...lineCounts(f));
      }
    }
  }
}

// lineCounts are the +N −M of a file of a diff, or that it is binary.
function lineCounts(f) {
  if (f.binary) {
    return [h("span", { class: "lines-binary", text: "binary" })];
  }
  if (f.note) {
    return [h("span", { class: "lines-binary", text: "not diffed" })];
  }
  return [h("span", { class: "lines-add", text: `+${f.added}` }), h("span", { class: "lines-del", text: `−${f.removed}` })];
}

// renderDiff draws the files of a parsed diff, at most MAX_DIFF_LINES
// lines of them.
export function renderDiff(files) {
  let budget = MAX_DIFF_LINES;
  let left = 0;
  const out = [];
  for (const f of files) {
    const head = h(
      "div",
      { class: "diff-file-head" },
      h("code", { class: "diff-path", text: f.from ? `${f.from} → ${f.path}` : f.path }),
      h("span", { class: "diff-change", text: f.change }),
      h("span", { class: "changed-lines" }, ...lineCounts(f)),
    );
    const section = h("section", { class: "diff-file", "data-path": f.path, "data-change": f.change }, head);
    if (f.binary) {
      section.append(h("p", { class: "diff-note", text: `Binary file ${f.change}; not shown.` }));
    } else if (f.note) {
      section.append(h("p", { class: "diff-note", text: f.note }));
    }
    const pre = h("pre", { class: "diff-lines" });
    for (const hunk of f.hunks) {
      if (budget <= 0) {
        left += hunk.lines.length + 1;
        continue;
      }
      pre.append(h("span", { class: "dl dl-hunk", text: hunk.header }));
      budget--;
      for (const l of hunk.lines) {
        if (budget <= 0) {
          left++;
          continue;
        }
        pre.append(h("span", { class: `dl dl-${l.kind}`, text: l.text }));
        budget--;
      }
    }
    if (pre.childElementCount > 0) {
      section.append(h("div", { class: "diff-scroll" }, pre));
    }
    out.push(section);
  }
  if (left > 0) {
    out.push(h("p", { class: "diff-note", text: `${left} more lines are not shown here; \`sparkles diff\` prints them all.` }));
  }
  return out;
}

// revertsAfter returns the workspace.reverted events at the end of a
// sandbox's log (up to id last, none below floor) that follow the last
// event of turn turnID. A revert waits for no turn to run, so after a
// reload these are the reverts since the snapshot's turn; one window of
// the log's end holds them unless hundreds came in a row.
export async function revertsAfter(api, id, turnID, { last, floor = 0, window = 256n }) {
  const hi = BigInt(last ?? 0);
  const low = BigInt(floor ?? 0);
  let since = hi - window > low ? hi - window : low;
  let out = [];
  for (;;) {
    const page = await api.events(id, since.toString(), 500);
    for (const env of page.data) {
      if (BigInt(env.id) > hi) {
        return out;
      }
      if (env.turn_id === turnID) {
        out = [];
      } else if (env.type === "workspace.reverted") {
        out.push(env);
      }
    }
    if (!page.has_more || page.data.length === 0) {
      return out;
    }
    since = BigInt(page.next_since);
  }
}
