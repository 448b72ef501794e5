// workspace.js puts the open sandbox's workspace into the console: the
// Files pane and the header button that shows it (beside the transcript on
// a wide screen, in its place on a narrow one), the file viewer, and the
// confirmation before a turn is reverted. Its elements are the page's, by
// id (index.html).
import { FilesPane, FileViewer } from "./files.js";

// FILES_KEY keeps whether the Files pane is open on a wide screen, across
// visits; a phone opens a sandbox on its transcript.
const FILES_KEY = "sparkles.files";

const $ = (id) => document.getElementById(id);

// Workspace is the workspace of whichever sandbox is open.
//
// Options: api is the page's API; narrow is the phone layout's media
// query; onError(e) reports a failed call the user asked for (the page
// shows it); onReverted(sandbox) is told the answer of a revert.
export class Workspace {
  #o;
  #id = null;
  #open = false;
  #toggle = $("files-toggle");
  #pane = $("files");
  #confirm = $("confirm-revert");
  #files;
  #viewer;

  constructor(options) {
    this.#o = { onError() {}, onReverted() {}, ...options };
    this.#files = new FilesPane(
      {
        pane: this.#pane,
        tree: $("files-tree"),
        status: $("files-status"),
        upload: $("files-upload"),
        uploadInput: $("files-upload-input"),
        archive: $("files-archive"),
        refresh: $("files-refresh"),
      },
      // The pane says its own failures; only a refused token is the page's.
      { api: this.#o.api, open: (path) => this.open(path), onError: (e) => e?.status === 401 && this.#o.onError(e) },
    );
    this.#viewer = new FileViewer(
      {
        dialog: $("file-viewer"),
        title: $("viewer-title"),
        meta: $("viewer-meta"),
        body: $("viewer-body"),
        download: $("viewer-download"),
        close: $("viewer-close"),
      },
      this.#o.api,
      (_id, path) => this.#files.download(path),
    );
    this.#toggle.addEventListener("click", () => {
      this.setOpen(!this.#open);
      // The keyboard follows: into the pane, or back to the button.
      (this.#open ? $("files-title") : this.#toggle).focus();
    });
    $("files-close").addEventListener("click", () => {
      this.setOpen(false);
      this.#toggle.focus();
    });
    this.#confirm.addEventListener("close", () => {
      if (this.#confirm.returnValue === "revert") {
        this.#revert(this.#confirm.dataset.turnId);
      }
    });
    this.setOpen(localStorage.getItem(FILES_KEY) === "open" && !this.#o.narrow.matches, { remember: false });
  }

  // hooks are what a turn's changes need (TurnChanges): its diff, the way
  // to revert it, and a file opened by name.
  get hooks() {
    return {
      diff: (turnID) => this.#o.api.diff(this.#id, turnID),
      revert: (turnID) => this.#ask(turnID),
      open: (path) => this.open(path),
    };
  }

  // show makes the workspace the one of sandbox id (null: none).
  show(id) {
    this.#id = id;
    this.#files.show(id);
    if (this.#o.narrow.matches && this.#open) {
      this.setOpen(false, { remember: false });
    }
    this.#files.setVisible(this.#open && id !== null);
  }

  // changed reads the tree again: a turn ended, a revert happened, or the
  // page is back from an outage during which the agent may have written.
  changed() {
    this.#files.refresh();
  }

  // open shows a file of the workspace in the viewer.
  open(path) {
    this.#viewer.open(this.#id, path);
  }

  // setOpen shows or hides the Files pane; remember keeps the choice of a
  // wide screen for the next visit.
  setOpen(open, { remember = true } = {}) {
    this.#open = open;
    if (remember && !this.#o.narrow.matches) {
      localStorage.setItem(FILES_KEY, open ? "open" : "");
    }
    this.#pane.hidden = !open;
    this.#pane.closest(".sandbox").dataset.files = open ? "open" : "";
    this.#toggle.setAttribute("aria-expanded", String(open));
    this.#files.setVisible(open && this.#id !== null);
  }

  // ask confirms a revert: everything changed since the turn's start goes,
  // what later turns did and uploads too.
  #ask(turnID) {
    const later = [...document.querySelectorAll("#transcript .turn")].filter((t) => t.dataset.turnId > turnID && t.dataset.turnId !== "~").length;
    $("revert-text").textContent =
      "Put the workspace back as it was when this turn started? What the turn changed" +
      (later > 0 ? `, and what the ${later === 1 ? "turn" : `${later} turns`} after it changed,` : "") +
      " goes back, and files added or changed since (uploads too) are lost. The transcript stays as it is.";
    this.#confirm.dataset.turnId = turnID;
    this.#confirm.returnValue = "";
    this.#confirm.showModal();
  }

  async #revert(turnID) {
    try {
      this.#o.onReverted(await this.#o.api.revert(this.#id, turnID));
    } catch (e) {
      this.#o.onError(e);
    }
  }
}
