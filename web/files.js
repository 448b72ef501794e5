// files.js is the Files pane of a sandbox: its workspace as a tree whose
// directories open on a click (read a page at a time), a file's content in
// a viewer, downloads of a file and of the whole workspace as .tar.gz, and
// uploads by dropping files (or a directory) onto the pane.
//
// Names and contents are the agent's: they go into the page as textContent
// only. Every call carries the bearer token, so a download is fetched as a
// blob and saved through an object URL rather than followed as a link.
import { h } from "./dom.js";

// PAGE is how many entries one read of a directory asks for.
const PAGE = 200;
// PREVIEW is the most of a file the viewer reads and shows.
const PREVIEW = 512 * 1024;

// formatSize says a size in bytes as people read it: "0 B", "12.3 KiB".
export function formatSize(n) {
  if (!Number.isFinite(n) || n < 0) {
    return "";
  }
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = n;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  if (i === 0) {
    return `${n} B`;
  }
  return `${v < 10 ? v.toFixed(1) : Math.round(v)} ${units[i]}`;
}

// TEXT_TYPES are the media types outside text/* that hold text.
const TEXT_TYPES = /^application\/(json|xml|javascript|x-sh|x-yaml|yaml|toml|x-httpd-php|sql)\b|\+json\b|\+xml\b/;

// looksText reports whether bytes (the start of a file) should be shown
// as text: its type says text, or, for a type the server could not tell
// (a Makefile, a LICENSE), the bytes hold no NUL and decode as UTF-8. A
// multi-byte character cut at the end of a preview does not count.
export function looksText(contentType, bytes) {
  const type = String(contentType ?? "").toLowerCase();
  if (type.startsWith("text/") || TEXT_TYPES.test(type)) {
    return true;
  }
  if (type !== "" && !type.startsWith("application/octet-stream")) {
    return false; // an image, an archive, a PDF: the server knew
  }
  const head = bytes.subarray(0, 8192);
  if (head.includes(0)) {
    return false;
  }
  try {
    new TextDecoder("utf-8", { fatal: true }).decode(bytes, { stream: true });
    return true;
  } catch {
    return false;
  }
}

// joinPath joins a directory of the workspace ("" is the root) and a name.
export const joinPath = (dir, name) => (dir ? `${dir}/${name}` : name);

// baseName is the last segment of a workspace path.
export const baseName = (p) => p.slice(p.lastIndexOf("/") + 1);

// dirName is the directory of a workspace path ("" for the root).
export const dirName = (p) => (p.includes("/") ? p.slice(0, p.lastIndexOf("/")) : "");

// readPreview reads at most max bytes of a response's body and stops the
// download there; total is the file's size when the answer says it.
export async function readPreview(resp, max = PREVIEW) {
  const total = Number(resp.headers.get("Content-Length") ?? NaN);
  if (!resp.body) {
    return { bytes: new Uint8Array(0), total: 0, complete: true };
  }
  const reader = resp.body.getReader();
  const chunks = [];
  let got = 0;
  try {
    while (got < max) {
      const { done, value } = await reader.read();
      if (done) {
        break;
      }
      chunks.push(value);
      got += value.length;
    }
  } finally {
    reader.cancel().catch(() => {});
  }
  const bytes = new Uint8Array(Math.min(got, max));
  let off = 0;
  for (const c of chunks) {
    const part = c.subarray(0, bytes.length - off);
    bytes.set(part, off);
    off += part.length;
  }
  return { bytes, total: Number.isFinite(total) ? total : got, complete: got <= max && (!Number.isFinite(total) || got >= total) };
}

// saveBlob hands blob to the browser as a download named name.
export function saveBlob(blob, name) {
  const url = URL.createObjectURL(blob);
  const a = h("a", { href: url, download: name, hidden: true });
  document.body.append(a);
  a.click();
  a.remove();
  // The download has taken its copy by the next task; the URL can go.
  setTimeout(() => URL.revokeObjectURL(url), 0);
}

// droppedFiles lists what a drop holds as {path, file}, paths relative to
// the drop: a dropped directory is walked (where the browser offers its
// entries), a plain file is its name.
export async function droppedFiles(dataTransfer) {
  const entries = [...(dataTransfer.items ?? [])]
    .filter((i) => i.kind === "file")
    .map((i) => ({ entry: i.webkitGetAsEntry?.() ?? null, file: i.getAsFile() }));
  if (entries.length === 0) {
    return [...(dataTransfer.files ?? [])].map((file) => ({ path: file.name, file }));
  }
  const out = [];
  for (const { entry, file } of entries) {
    if (entry?.isDirectory) {
      await walkEntry(entry, entry.name, out);
    } else if (file) {
      out.push({ path: file.name, file });
    }
  }
  return out;
}

async function walkEntry(dir, prefix, out) {
  const reader = dir.createReader();
  for (;;) {
    // readEntries answers in batches until an empty one.
    const batch = await new Promise((resolve, reject) => reader.readEntries(resolve, reject));
    if (batch.length === 0) {
      return;
    }
    for (const e of batch) {
      const p = `${prefix}/${e.name}`;
      if (e.isDirectory) {
        await walkEntry(e, p, out);
      } else {
        out.push({ path: p, file: await new Promise((resolve, reject) => e.file(resolve, reject)) });
      }
    }
  }
}

// FilesPane fills the pane's elements ({pane, tree, status, upload,
// uploadInput, archive, refresh}) with the workspace of the open sandbox.
//
// Options: api is the page's API; open(path) shows a file; onError(e)
// reports a failure that is not the pane's to say (a refused token).
export class FilesPane {
  #ui;
  #o;
  #id = null;
  #visible = false;
  #expanded = new Set(); // the open directories, kept across refreshes
  #gen = 0; // bumps with each redraw, so a late answer of an old one is dropped
  #busy = false;

  constructor(ui, options) {
    this.#ui = ui;
    this.#o = { onError() {}, open() {}, ...options };
    ui.refresh.addEventListener("click", () => this.refresh());
    ui.archive.addEventListener("click", () => this.#downloadArchive());
    ui.upload.addEventListener("click", () => ui.uploadInput.click());
    ui.uploadInput.addEventListener("change", () => {
      const files = [...ui.uploadInput.files].map((file) => ({ path: file.name, file }));
      ui.uploadInput.value = "";
      this.#upload(files, "");
    });
    this.#listenForDrops(ui.pane);
  }

  // show makes the pane belong to sandbox id (null: none).
  show(id) {
    if (id === this.#id) {
      return;
    }
    this.#id = id;
    this.#expanded.clear();
    this.#ui.tree.replaceChildren();
    this.#say("");
    this.refresh();
  }

  // setVisible tells whether the pane is on screen; a hidden pane reads
  // nothing.
  setVisible(visible) {
    const was = this.#visible;
    this.#visible = visible;
    if (visible && !was) {
      this.refresh();
    }
  }

  // refresh reads the tree again: the root and every open directory.
  async refresh() {
    if (!this.#visible || !this.#id) {
      return;
    }
    const gen = ++this.#gen;
    const id = this.#id;
    const root = h("ul", { class: "tree", role: "list" });
    try {
      await this.#fill(root, "", gen);
    } catch (e) {
      if (gen === this.#gen) {
        this.#failed(`Could not list the files: ${e.message}`, e);
      }
      return;
    }
    if (gen !== this.#gen || id !== this.#id) {
      return;
    }
    // The keyboard stays on the entry it was on, where it is still there.
    const tree = this.#ui.tree;
    const focused = tree.contains(document.activeElement) ? document.activeElement : null;
    const path = focused?.closest(".node")?.dataset.path;
    const role = focused?.classList.contains("node-download") ? ".node-download" : ".node-name";
    tree.replaceChildren(...root.childNodes);
    if (focused && path !== undefined) {
      const again = [...tree.querySelectorAll(".node")].find((n) => n.dataset.path === path);
      again?.querySelector(`:scope > ${role}`)?.focus({ preventScroll: true });
    }
    this.#ui.pane.dataset.loaded = id;
    if (!this.#busy && this.#ui.status.dataset.kind === "error") {
      this.#say("");
    }
  }

  // fill lists directory dir into ul, and opens the directories of it that
  // were open; more pages come with a button.
  async #fill(ul, dir, gen, after = "") {
    const page = await this.#o.api.files(this.#id, dir, { after, limit: PAGE });
    if (gen !== this.#gen) {
      return;
    }
    const opened = [];
    for (const e of page.data) {
      const node = this.#node(e);
      ul.append(node);
      if (e.type === "dir" && this.#expanded.has(e.path)) {
        opened.push(this.#expand(node, e.path, gen));
      }
    }
    if (!after && page.data.length === 0) {
      ul.append(h("li", { class: "tree-empty", text: dir ? "Empty directory" : "No files yet. Drop files here, or ask the agent to write one." }));
    }
    if (page.has_more) {
      const more = h("button", { type: "button", class: "ghost tree-more", text: "Show more" });
      const li = h("li", { class: "tree-more-item" }, more);
      more.addEventListener("click", async () => {
        more.disabled = true;
        try {
          await this.#fill(ul, dir, this.#gen, page.data.at(-1).path);
          li.remove();
        } catch (e) {
          more.disabled = false;
          this.#failed(`Could not list ${dir || "the files"}: ${e.message}`, e);
        }
      });
      ul.append(li);
    }
    // A directory that went away since is dropped from the open ones.
    await Promise.all(opened.map((p) => p.catch(() => {})));
  }

  #node(e) {
    const name = baseName(e.path);
    const li = h("li", { class: "node", "data-path": e.path, "data-type": e.type });
    if (e.type === "dir") {
      const b = h(
        "button",
        { type: "button", class: "node-name", "aria-expanded": "false", "aria-label": `${name}, directory` },
        h("span", { class: "node-icon", "aria-hidden": "true", text: "▸" }),
        h("span", { class: "node-label", text: name }),
      );
      b.addEventListener("click", () => this.#toggle(li, e.path));
      li.append(b);
      return li;
    }
    if (e.type === "file" || e.type === "symlink") {
      const b = h(
        "button",
        { type: "button", class: "node-name", "aria-label": `Open ${name}` },
        h("span", { class: "node-icon", "aria-hidden": "true", text: e.type === "symlink" ? "↪" : "·" }),
        h("span", { class: "node-label", text: name }),
      );
      b.addEventListener("click", () => this.#o.open(e.path));
      const dl = h("button", { type: "button", class: "ghost icon node-download", "aria-label": `Download ${name}`, title: "Download", text: "⤓" });
      dl.addEventListener("click", () => this.download(e.path));
      li.append(b, h("span", { class: "node-size", text: e.type === "symlink" ? "link" : formatSize(e.size) }), dl);
      return li;
    }
    li.append(
      h(
        "span",
        { class: "node-name node-other" },
        h("span", { class: "node-icon", "aria-hidden": "true", text: "?" }),
        h("span", { class: "node-label", text: name }),
      ),
    );
    return li;
  }

  async #toggle(li, path) {
    const button = li.querySelector(":scope > .node-name");
    const sub = li.querySelector(":scope > .tree");
    if (button.getAttribute("aria-expanded") === "true") {
      button.setAttribute("aria-expanded", "false");
      li.querySelector(":scope > .node-name .node-icon").textContent = "▸";
      sub?.remove();
      this.#expanded.delete(path);
      return;
    }
    this.#expanded.add(path);
    try {
      await this.#expand(li, path, this.#gen);
    } catch (e) {
      this.#expanded.delete(path);
      this.#failed(`Could not open ${path}: ${e.message}`, e);
    }
  }

  async #expand(li, path, gen) {
    const ul = h("ul", { class: "tree", role: "list" });
    await this.#fill(ul, path, gen);
    li.querySelector(":scope > .tree")?.remove();
    li.append(ul);
    const button = li.querySelector(":scope > .node-name");
    button.setAttribute("aria-expanded", "true");
    button.querySelector(".node-icon").textContent = "▾";
  }

  // download saves one file of the workspace.
  async download(path) {
    try {
      const resp = await this.#o.api.file(this.#id, path, { download: true });
      saveBlob(await resp.blob(), baseName(path));
    } catch (e) {
      this.#failed(`Could not download ${path}: ${e.message}`, e);
    }
  }

  async #downloadArchive() {
    const id = this.#id;
    this.#ui.archive.disabled = true;
    this.#say("Packing the workspace…");
    try {
      const resp = await this.#o.api.archive(id);
      const blob = await resp.blob();
      saveBlob(blob, `${id}.tar.gz`);
      this.#say(`Downloaded ${id}.tar.gz (${formatSize(blob.size)}).`);
    } catch (e) {
      this.#failed(`Could not download the workspace: ${e.message}`, e);
    } finally {
      this.#ui.archive.disabled = false;
    }
  }

  #listenForDrops(el) {
    const carriesFiles = (ev) => [...(ev.dataTransfer?.types ?? [])].includes("Files");
    let depth = 0; // dragenter and dragleave fire for every child crossed
    el.addEventListener("dragenter", (ev) => {
      if (carriesFiles(ev)) {
        depth++;
        el.dataset.drop = "over";
      }
    });
    el.addEventListener("dragleave", () => {
      depth = Math.max(0, depth - 1);
      if (depth === 0) {
        delete el.dataset.drop;
      }
    });
    el.addEventListener("dragover", (ev) => {
      if (carriesFiles(ev)) {
        ev.preventDefault();
        ev.dataTransfer.dropEffect = "copy";
      }
    });
    el.addEventListener("drop", async (ev) => {
      if (!carriesFiles(ev)) {
        return;
      }
      ev.preventDefault();
      depth = 0;
      delete el.dataset.drop;
      // Dropped on a directory, the files go into it; on a file, beside it.
      const node = ev.target.closest?.(".node");
      const dir = !node ? "" : node.dataset.type === "dir" ? node.dataset.path : dirName(node.dataset.path);
      let files;
      try {
        files = await droppedFiles(ev.dataTransfer);
      } catch (e) {
        this.#failed(`Could not read what was dropped: ${e.message}`, e);
        return;
      }
      this.#upload(files, dir);
    });
  }

  // upload writes each file into dir, one at a time, then reads the tree
  // again. A file that is there already is replaced, as cp does.
  async #upload(files, dir) {
    if (files.length === 0 || !this.#id) {
      return;
    }
    const id = this.#id;
    this.#busy = true;
    let done = 0;
    try {
      for (const { path, file } of files) {
        const target = joinPath(dir, path);
        this.#say(files.length === 1 ? `Uploading ${target}…` : `Uploading ${done + 1} of ${files.length}: ${target}…`);
        await this.#o.api.writeFile(id, target, file);
        done++;
        // The directory the files went to opens, so they are in view.
        for (let d = dirName(target); d; d = dirName(d)) {
          this.#expanded.add(d);
        }
      }
      this.#say(done === 1 ? `Uploaded ${joinPath(dir, files[0].path)}.` : `Uploaded ${done} files.`);
    } catch (e) {
      this.#failed(`Uploaded ${done} of ${files.length}; the next failed: ${e.message}`, e);
    } finally {
      this.#busy = false;
      if (id === this.#id) {
        await this.refresh();
      }
    }
  }

  #say(text, kind = "") {
    this.#ui.status.textContent = text;
    this.#ui.status.dataset.kind = kind;
  }

  #failed(text, e) {
    this.#say(text, "error");
    this.#o.onError(e);
  }
}

// FileViewer shows one file of the workspace in a dialog ({dialog, title,
// meta, body, download, close}): text as text, the first PREVIEW bytes of
// a large one, and only the size of a binary one.
export class FileViewer {
  #ui;
  #api;
  #abort = null;
  #current = null; // {id, path}
  #download;

  // download(id, path) saves the file.
  constructor(ui, api, download) {
    this.#ui = ui;
    this.#api = api;
    this.#download = download;
    ui.download.addEventListener("click", () => this.#current && this.#download(this.#current.id, this.#current.path));
    ui.close.addEventListener("click", () => ui.dialog.close());
    ui.dialog.addEventListener("close", () => {
      // The close event comes a task after close(): a file opened in
      // between has the dialog open again, and its read must go on.
      if (ui.dialog.open) {
        return;
      }
      this.#abort?.abort();
      this.#abort = null;
      this.#current = null;
      ui.body.replaceChildren();
    });
  }

  async open(id, path) {
    this.#abort?.abort();
    const abort = new AbortController();
    this.#abort = abort;
    this.#current = { id, path };
    const ui = this.#ui;
    ui.title.textContent = path;
    ui.meta.textContent = "Loading…";
    ui.body.replaceChildren();
    ui.dialog.dataset.state = "loading";
    if (!ui.dialog.open) {
      ui.dialog.showModal();
    }
    try {
      const resp = await this.#api.file(id, path, { signal: abort.signal });
      const type = resp.headers.get("Content-Type") ?? "";
      const modified = resp.headers.get("Last-Modified");
      const { bytes, total, complete } = await readPreview(resp);
      if (abort.signal.aborted) {
        return;
      }
      const when = modified ? ` · modified ${new Date(modified).toLocaleString()}` : "";
      ui.meta.textContent = `${formatSize(total)}${when}`;
      if (looksText(type, bytes)) {
        const text = new TextDecoder().decode(bytes);
        ui.body.replaceChildren(h("pre", { class: "file-text", tabindex: "0", "aria-label": `Content of ${path}`, text }));
        if (!complete) {
          const note = `Showing the first ${formatSize(bytes.length)} of ${formatSize(total)}; download the file for the rest.`;
          ui.body.append(h("p", { class: "file-note", text: note }));
        }
        ui.dialog.dataset.state = "text";
      } else {
        const note = `A binary file (${type || "of an unknown type"}, ${formatSize(total)}); download it to open it.`;
        ui.body.replaceChildren(h("p", { class: "file-note", text: note }));
        ui.dialog.dataset.state = "binary";
      }
    } catch (e) {
      if (abort.signal.aborted) {
        return;
      }
      ui.meta.textContent = "";
      ui.body.replaceChildren(h("p", { class: "file-note error-text", text: `Could not open ${path}: ${e.message}` }));
      ui.dialog.dataset.state = "error";
    }
  }
}
