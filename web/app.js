// app.js is the Sparkles console: the token form, the sandbox list, and the
// view of one sandbox with its live transcript and prompt box. The address
// names the open sandbox (#/sandboxes/<id>), so a reload comes back to it;
// the token stays in sessionStorage, for this tab only.
import { API } from "./api.js";
import { APIError, SandboxEventStream, State } from "./sparkles-events.js";
import { Transcript, h } from "./view.js";

const TOKEN_KEY = "sparkles.token";
const LIST_REFRESH_MS = 15000;

const $ = (id) => document.getElementById(id);

const ui = {
  login: $("login"),
  tokenForm: $("token-form"),
  token: $("token"),
  tokenError: $("token-error"),
  app: $("app"),
  signOut: $("sign-out"),
  newSandbox: $("new-sandbox"),
  list: $("sandbox-list"),
  more: $("more-sandboxes"),
  empty: $("empty"),
  sandbox: $("sandbox"),
  title: $("sandbox-title"),
  status: $("sandbox-status"),
  connection: $("connection"),
  connectionText: $("connection-text"),
  deleteSandbox: $("delete-sandbox"),
  notice: $("notice"),
  noticeText: $("notice-text"),
  noticeClose: $("notice-close"),
  scroller: $("transcript-scroll"),
  earlier: $("earlier-turns"),
  earlierStatus: $("earlier-status"),
  transcript: $("transcript"),
  promptForm: $("prompt-form"),
  prompt: $("prompt"),
  send: $("send"),
  cancel: $("cancel-turn"),
  turnStatus: $("turn-status"),
  announce: $("announce"),
  confirm: $("confirm-delete"),
  confirmText: $("confirm-text"),
};

const state = {
  token: "",
  api: new API(() => state.token),
  sandboxes: new Map(), // id -> Sandbox, as last seen
  after: "", // the list's next page cursor
  selected: null, // the open sandbox id
  sandbox: null, // the open sandbox resource
  stream: null,
  refreshTimer: 0,
  earlierChecked: null, // the sandbox whose log was looked into for earlier turns
};

const transcript = new Transcript(ui.transcript, {
  decide: (a, body) => state.api.decide(state.selected, a.approval_id, body),
  onCurrent: () => updateControls(),
  announce,
  notice: showNotice,
});

// ---- token ----

function takeTokenFromAddress() {
  // serve may print a URL with the token in the fragment (never sent to the
  // server); keep it for this tab and take it out of the address bar.
  const m = /^#token=([^&]+)/.exec(location.hash);
  if (!m) {
    return false;
  }
  sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(m[1]));
  history.replaceState(null, "", location.pathname + location.search);
  return true;
}

function showLogin(message = "") {
  closeStream();
  clearInterval(state.refreshTimer);
  state.token = "";
  sessionStorage.removeItem(TOKEN_KEY);
  ui.app.hidden = true;
  ui.signOut.hidden = true;
  ui.login.hidden = false;
  ui.tokenError.textContent = message;
  ui.token.value = "";
  ui.token.focus();
}

async function signIn(token) {
  state.token = token;
  try {
    await loadList();
  } catch (e) {
    if (e instanceof APIError && (e.status === 401 || e.status === 403)) {
      showLogin("The server did not accept this token.");
      return;
    }
    showLogin(`Could not reach the server: ${e.message}`);
    sessionStorage.setItem(TOKEN_KEY, token); // not the token's fault
    return;
  }
  sessionStorage.setItem(TOKEN_KEY, token);
  ui.login.hidden = true;
  ui.app.hidden = false;
  ui.signOut.hidden = false;
  clearInterval(state.refreshTimer);
  state.refreshTimer = setInterval(() => {
    if (document.visibilityState === "visible") {
      // While the server is away the connection indicator says so; only
      // an answer of the server itself is worth a notice.
      loadList().catch((e) => e instanceof APIError && handleError(e));
    }
  }, LIST_REFRESH_MS);
  route();
}

// handleError shows a failed call; a refused token sends the user back to
// the token form.
function handleError(e) {
  if (e instanceof APIError && e.status === 401) {
    showLogin("The server no longer accepts this token.");
    return;
  }
  showNotice(e.message || String(e));
}

// ---- sandbox list ----

async function loadList() {
  const first = await state.api.listSandboxes();
  // A refresh reloads the first page; later pages stay as they were.
  for (const sb of first.data) {
    state.sandboxes.set(sb.id, sb);
  }
  if (state.after === "" && first.has_more) {
    state.after = first.data.at(-1)?.id ?? "";
  }
  ui.more.hidden = state.after === "";
  renderList();
}

async function loadMore() {
  const page = await state.api.listSandboxes({ after: state.after });
  for (const sb of page.data) {
    state.sandboxes.set(sb.id, sb);
  }
  state.after = page.has_more ? (page.data.at(-1)?.id ?? "") : "";
  ui.more.hidden = state.after === "";
  renderList();
}

const displayName = (sb) => sb.metadata?.name || sb.id;

function renderList() {
  // The list is rebuilt whole; keep the keyboard where it was.
  const focused = document.activeElement;
  const focusID = ui.list.contains(focused) ? focused.closest(".sb-item")?.dataset.sandboxId : undefined;
  const focusClass = focused?.tagName === "BUTTON" ? "button" : "a";
  // Newest first: ids sort by creation time.
  const ids = [...state.sandboxes.keys()].sort().reverse();
  const items = ids.map((id) => {
    const sb = state.sandboxes.get(id);
    const link = h(
      "a",
      { class: "sb-link", href: `#/sandboxes/${encodeURIComponent(id)}`, "aria-current": id === state.selected ? "page" : null },
      h("span", { class: "sb-name", text: displayName(sb) }),
      h("span", { class: `badge status-${sb.status}`, text: sb.status }),
      h("span", { class: "sb-meta", text: `created ${new Date(sb.created_at).toLocaleString()}` }),
    );
    const li = h("li", { class: "sb-item", "data-sandbox-id": id, "data-status": sb.status }, link);
    if (sb.status !== "deleted") {
      const del = h("button", { type: "button", class: "icon ghost", "aria-label": `Delete sandbox ${displayName(sb)}`, title: "Delete", text: "✕" });
      del.addEventListener("click", () => confirmDelete(id));
      li.append(del);
    }
    return li;
  });
  if (items.length === 0) {
    items.push(h("li", { class: "sb-none", text: "No sandboxes yet." }));
  }
  ui.list.replaceChildren(...items);
  if (focusID !== undefined) {
    const item = ui.list.querySelector(`.sb-item[data-sandbox-id="${CSS.escape(focusID)}"]`);
    (item?.querySelector(focusClass) ?? item?.querySelector("a"))?.focus();
  }
}

function rememberSandbox(sb) {
  state.sandboxes.set(sb.id, { ...state.sandboxes.get(sb.id), ...sb });
  if (sb.id === state.selected) {
    state.sandbox = state.sandboxes.get(sb.id);
    renderHeader();
  }
  renderList();
}

async function createSandbox() {
  ui.newSandbox.disabled = true;
  try {
    const sb = await state.api.createSandbox({});
    delete sb.stream_token; // this page uses its own token
    rememberSandbox(sb);
    location.hash = `#/sandboxes/${encodeURIComponent(sb.id)}`;
    ui.prompt.focus();
  } catch (e) {
    handleError(e);
  } finally {
    ui.newSandbox.disabled = false;
  }
}

function confirmDelete(id) {
  const sb = state.sandboxes.get(id);
  ui.confirmText.textContent = `Delete sandbox ${sb ? displayName(sb) : id}? Its agent is stopped and a running turn is canceled.`;
  ui.confirm.dataset.sandboxId = id;
  ui.confirm.returnValue = "";
  ui.confirm.showModal();
}

async function deleteSandbox(id) {
  try {
    rememberSandbox(await state.api.deleteSandbox(id));
  } catch (e) {
    handleError(e);
  }
}

// ---- one sandbox ----

function route() {
  const m = /^#\/sandboxes\/([^/]+)$/.exec(location.hash);
  const id = m ? decodeURIComponent(m[1]) : null;
  if (id !== state.selected) {
    openSandbox(id);
  }
}

function closeStream() {
  state.stream?.close();
  state.stream = null;
}

function openSandbox(id) {
  closeStream();
  hideNotice();
  transcript.clear();
  ui.earlier.hidden = true;
  delete ui.earlier.dataset.checked;
  ui.earlierStatus.textContent = "";
  state.earlierChecked = null;
  state.selected = id;
  state.sandbox = id ? (state.sandboxes.get(id) ?? { id, status: "" }) : null;
  renderList();
  ui.empty.hidden = id !== null;
  ui.sandbox.hidden = id === null;
  if (!id) {
    return;
  }
  renderHeader();
  setConnection(State.CONNECTING);
  state.stream = new SandboxEventStream({
    sandboxId: id,
    token: () => state.token,
    onSnapshot(snap, info) {
      rememberSandbox(snap.sandbox);
      transcript.applySnapshot(snap, info);
      scrollToEnd(true);
      offerEarlier(id).catch(handleError);
    },
    onEvent(env) {
      const stick = nearEnd();
      transcript.applyEvent(env);
      scrollToEnd(stick);
    },
    onStatus(d) {
      rememberSandbox({ id, status: d.status, status_detail: d.detail });
    },
    onGap() {
      showNotice("Retention removed some events of this sandbox before this page could read them; the view may miss them.");
    },
    onState: setConnection,
    onError(e) {
      if (e instanceof APIError && e.status === 404) {
        showNotice("This sandbox does not exist (any more).");
        return;
      }
      handleError(e);
    },
  }).start();
  updateControls();
}

function renderHeader() {
  const sb = state.sandbox;
  ui.title.textContent = displayName(sb);
  ui.status.className = `badge status-${sb.status || "unknown"}`;
  ui.status.textContent = sb.status || "…";
  ui.status.title = sb.status_detail || "";
  updateControls();
}

const CONNECTION_TEXT = {
  [State.CONNECTING]: "Connecting…",
  [State.LIVE]: "Live",
  [State.RECONNECTING]: "Reconnecting…",
  [State.RECOVERING]: "Recovering…",
  [State.CLOSED]: "Disconnected",
};

function setConnection(s) {
  ui.connection.dataset.state = s;
  ui.connectionText.textContent = CONNECTION_TEXT[s] ?? s;
}

function updateControls() {
  const sb = state.sandbox;
  const cur = transcript.current;
  const gone = !sb || sb.status === "deleted";
  ui.send.disabled = gone || cur !== null;
  ui.prompt.disabled = gone;
  ui.cancel.disabled = gone || cur === null;
  ui.deleteSandbox.disabled = gone;
  let text = "";
  if (gone && sb) {
    text = "This sandbox was deleted.";
  } else if (cur) {
    text = cur.status === "queued" ? "Turn queued…" : "Turn running…";
  } else if (sb && sb.status && sb.status !== "ready" && sb.status !== "stopped") {
    text = `Agent ${sb.status}…`;
  }
  ui.turnStatus.textContent = text;
}

async function sendPrompt() {
  const input = ui.prompt.value.trim();
  if (input === "" || ui.send.disabled) {
    return;
  }
  ui.send.disabled = true;
  try {
    const turn = await state.api.startTurn(state.selected, input);
    ui.prompt.value = "";
    transcript.addTurn(turn);
    scrollToEnd(true);
  } catch (e) {
    handleError(e);
  } finally {
    updateControls();
  }
}

async function cancelTurn() {
  const cur = transcript.current;
  if (!cur) {
    return;
  }
  ui.cancel.disabled = true;
  try {
    await state.api.cancelTurn(state.selected, cur.id);
  } catch (e) {
    handleError(e);
    updateControls();
  }
}

// ---- earlier turns ----
//
// The snapshot shows the sandbox's current or last turn. The turns before
// it are in the log: the page offers them when the log holds some, and
// reads them as JSON pages when asked.

// firstTurn returns the turn of the log's first event that has one, or null.
async function firstTurn(id) {
  let since = "0";
  for (;;) {
    const page = await state.api.events(id, since, 100);
    const ev = page.data.find((e) => e.turn_id);
    if (ev) {
      return ev.turn_id;
    }
    if (!page.has_more) {
      return null;
    }
    since = page.next_since;
  }
}

// offerEarlier shows the button when the log holds a turn before the
// snapshot's; it looks once per opening of a sandbox, and then names the
// sandbox in the button's data-checked.
async function offerEarlier(id) {
  if (!transcript.snapshotTurn || state.earlierChecked === id) {
    return;
  }
  state.earlierChecked = id;
  const first = await firstTurn(id);
  if (state.selected !== id) {
    return;
  }
  ui.earlier.hidden = !first || first === transcript.snapshotTurn;
  ui.earlier.dataset.checked = id;
}

async function loadEarlier() {
  const id = state.selected;
  const s = ui.scroller;
  const fromEnd = s.scrollHeight - s.scrollTop;
  ui.earlier.disabled = true;
  ui.earlierStatus.textContent = "Loading earlier turns…";
  try {
    let since = "0";
    read: for (;;) {
      const page = await state.api.events(id, since, 500);
      if (state.selected !== id) {
        return;
      }
      for (const env of page.data) {
        if (!transcript.applyEarlier(env)) {
          break read;
        }
      }
      if (!page.has_more) {
        break;
      }
      since = page.next_since;
    }
    ui.earlier.hidden = true;
    s.scrollTop = s.scrollHeight - fromEnd; // what was in view stays there
    announce("Earlier turns shown");
  } catch (e) {
    handleError(e);
  } finally {
    ui.earlier.disabled = false;
    ui.earlierStatus.textContent = "";
  }
}

// ---- small things ----

function nearEnd() {
  const s = ui.scroller;
  return s.scrollHeight - s.scrollTop - s.clientHeight < 80;
}

function scrollToEnd(stick) {
  if (stick) {
    ui.scroller.scrollTop = ui.scroller.scrollHeight;
  }
}

function showNotice(text) {
  ui.noticeText.textContent = text;
  ui.notice.hidden = false;
}

function hideNotice() {
  ui.notice.hidden = true;
  ui.noticeText.textContent = "";
}

function announce(text) {
  ui.announce.textContent = text;
}

// ---- wiring ----

ui.tokenForm.addEventListener("submit", (ev) => {
  ev.preventDefault();
  const token = ui.token.value.trim();
  if (token) {
    signIn(token);
  }
});
ui.signOut.addEventListener("click", () => showLogin());
ui.newSandbox.addEventListener("click", createSandbox);
ui.more.addEventListener("click", () => loadMore().catch(handleError));
ui.deleteSandbox.addEventListener("click", () => state.selected && confirmDelete(state.selected));
ui.confirm.addEventListener("close", () => {
  if (ui.confirm.returnValue === "delete") {
    deleteSandbox(ui.confirm.dataset.sandboxId);
  }
});
ui.noticeClose.addEventListener("click", hideNotice);
ui.promptForm.addEventListener("submit", (ev) => {
  ev.preventDefault();
  sendPrompt();
});
ui.prompt.addEventListener("keydown", (ev) => {
  // Enter sends, Shift+Enter starts a new line; an IME composition keeps
  // its Enter.
  if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) {
    ev.preventDefault();
    sendPrompt();
  }
});
ui.cancel.addEventListener("click", cancelTurn);
ui.earlier.addEventListener("click", loadEarlier);
window.addEventListener("hashchange", () => {
  if (takeTokenFromAddress()) {
    signIn(sessionStorage.getItem(TOKEN_KEY));
  } else if (state.token) {
    route();
  }
});

takeTokenFromAddress();
const saved = sessionStorage.getItem(TOKEN_KEY);
if (saved) {
  signIn(saved);
} else {
  showLogin();
}
