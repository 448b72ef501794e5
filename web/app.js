// app.js is the Sparkles console: the token form, the sandbox list, and the
// view of one sandbox with its live transcript and prompt box. The address
// names the open sandbox (#/sandboxes/<id>), so a reload comes back to it;
// on a phone the list and the open sandbox are two views, and #/ is the
// list. #/webhooks opens the webhook endpoints (webhooks.js) in the place
// of a sandbox. The token stays in sessionStorage, for this tab only.
import { API, NetworkError } from "./api.js";
import { answeredHere } from "./approval.js";
import { revertsAfter } from "./changes.js";
import { h, sandboxState, statusWords } from "./dom.js";
import { Guide } from "./guide.js";
import { earlierEvents, firstTurn, turnEvents } from "./history.js";
import { SandboxList } from "./list.js";
import { APIError, SandboxEventStream, State } from "./sparkles-events.js";
import { configWords, Transcript } from "./view.js";
import { WebhookList } from "./webhooks.js";
import { Workspace } from "./workspace.js";

const TOKEN_KEY = "sparkles.token";
// The list is read again this often while the page is in view: the open
// sandbox's stream keeps its own row live, the others catch up this way.
const LIST_REFRESH_MS = 10000;

const $ = (id) => document.getElementById(id);

// narrow is the phone layout of style.css: the list and the open sandbox
// are two views.
const narrow = matchMedia("(max-width: 720px)");

const ui = {
  login: $("login"),
  tokenForm: $("token-form"),
  token: $("token"),
  tokenError: $("token-error"),
  app: $("app"),
  signOut: $("sign-out"),
  newSandbox: $("new-sandbox"),
  list: $("sandbox-list"),
  showDeletedLabel: $("show-deleted-label"),
  showDeleted: $("show-deleted"),
  showDeletedText: $("show-deleted-text"),
  empty: $("empty"),
  intro: $("intro"),
  introCreate: $("intro-create"),
  pick: $("pick"),
  sandbox: $("sandbox"),
  title: $("sandbox-title"),
  sandboxID: $("sandbox-id"),
  sandboxConfig: $("sandbox-config"),
  status: $("sandbox-status"),
  connection: $("connection"),
  connectionText: $("connection-text"),
  deleteSandbox: $("delete-sandbox"),
  offline: $("offline"),
  offlineTitle: $("offline-title"),
  offlineText: $("offline-text"),
  notice: $("notice"),
  noticeText: $("notice-text"),
  noticeClose: $("notice-close"),
  scroller: $("transcript-scroll"),
  earlier: $("earlier-turns"),
  earlierStatus: $("earlier-status"),
  transcript: $("transcript"),
  pending: $("pending"),
  guide: $("guide"),
  guideText: $("guide-text"),
  examples: $("examples"),
  promptForm: $("prompt-form"),
  prompt: $("prompt"),
  send: $("send"),
  cancel: $("cancel-turn"),
  turnStatus: $("turn-status"),
  announce: $("announce"),
  confirm: $("confirm-delete"),
  confirmText: $("confirm-text"),
  webhooksLink: $("webhooks-link"),
  webhooks: $("webhooks"),
  webhooksTitle: $("webhooks-title"),
  webhooksStatus: $("webhooks-status"),
  webhookList: $("webhook-list"),
};

const state = {
  token: "",
  api: new API(() => state.token),
  selected: null, // the open sandbox id
  stream: null,
  conn: State.CONNECTING, // the open sandbox's stream state
  connError: null, // why the stream ended for good, when it did
  missing: false, // the server says the open sandbox does not exist
  snapshotSeen: false, // the open sandbox's first snapshot arrived
  refreshTimer: 0,
  earlierChecked: null, // the sandbox whose log was looked into for earlier turns
  behindRead: null, // the sandbox whose snapshot turn was read from the log
};

const workspace = new Workspace({
  api: state.api,
  narrow,
  onError: handleError,
  onReverted: (sb) => list.remember(sb),
});

const list = new SandboxList(state.api, ui.list, {
  onDelete: confirmDelete,
  onRender: renderFrame,
});

const transcript = new Transcript(ui.transcript, {
  dock: ui.pending,
  decide: (a, body) => state.api.decide(state.selected, a.approval_id, body),
  decided: answeredHere,
  onChange: () => updateControls(),
  announce,
  notice: showNotice,
  workspace: workspace.hooks,
});

const guide = new Guide({ el: ui.guide, text: ui.guideText, examples: ui.examples }, (prompt) => {
  ui.prompt.value = prompt;
  ui.prompt.focus();
  ui.prompt.setSelectionRange(prompt.length, prompt.length);
});

// The webhooks view (#/webhooks) needs the full token; the page signs in
// only with one (listing the sandboxes takes it).
const webhooks = new WebhookList(state.api, ui.webhookList, {
  status: (text) => {
    ui.webhooksStatus.textContent = text;
  },
  announce,
  onError(e) {
    if (e instanceof APIError && e.status === 401) {
      showLogin("The server no longer accepts this token.");
      return true;
    }
    return false;
  },
});

const openSandboxResource = () => (state.selected ? (list.get(state.selected) ?? { id: state.selected, status: "" }) : null);

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
  showWebhooks(false);
  ui.webhooksLink.hidden = true;
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
    await list.load();
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
  ui.webhooksLink.hidden = false;
  clearInterval(state.refreshTimer);
  state.refreshTimer = setInterval(refreshList, LIST_REFRESH_MS);
  route();
}

function refreshList() {
  if (document.visibilityState === "visible" && state.token) {
    // While the server is away the connection banner says so; only an
    // answer of the server itself is worth a notice.
    list.load().catch((e) => e instanceof APIError && handleError(e));
  }
}

// handleError shows a failed call; a refused token sends the user back to
// the token form.
function handleError(e) {
  if (e instanceof APIError && e.status === 401) {
    showLogin("The server no longer accepts this token.");
    return;
  }
  if (e instanceof NetworkError) {
    showNotice(e.message);
    return;
  }
  showNotice(e.message || String(e));
}

// quietly handles the failure of a read the page does on its own: while
// the server is away the banner says so, and a 410 (retention moved on
// meanwhile) only means there is less to show.
function quietly(e) {
  if (e instanceof NetworkError || (e instanceof APIError && e.status === 410)) {
    return;
  }
  handleError(e);
}

// ---- the sandbox list ----

// renderFrame shows what depends on the list: the open sandbox's header,
// the welcome of an empty server, the toggle of deleted sandboxes.
function renderFrame() {
  const live = list.size - list.deleted;
  ui.intro.hidden = live > 0;
  ui.pick.hidden = live === 0;
  ui.app.toggleAttribute("data-empty", live === 0);
  const hidden = list.deleted;
  ui.showDeletedLabel.hidden = hidden === 0;
  ui.showDeletedText.textContent = `Show deleted (${hidden})`;
  if (state.selected) {
    renderHeader();
  }
}

async function createSandbox() {
  ui.newSandbox.disabled = true;
  ui.introCreate.disabled = true;
  try {
    const sb = await state.api.createSandbox({});
    delete sb.stream_token; // this page uses its own token
    list.remember(sb);
    location.hash = `#/sandboxes/${encodeURIComponent(sb.id)}`;
    route(); // now, so that the prompt box is there to focus
    ui.prompt.focus();
  } catch (e) {
    handleError(e);
  } finally {
    ui.newSandbox.disabled = false;
    ui.introCreate.disabled = false;
  }
}

function confirmDelete(id) {
  ui.confirmText.textContent = `Delete sandbox “${list.name(id)}”? Its agent is stopped and a running turn is canceled.`;
  ui.confirm.dataset.sandboxId = id;
  ui.confirm.returnValue = "";
  ui.confirm.showModal();
}

async function deleteSandbox(id) {
  try {
    list.remember(await state.api.deleteSandbox(id));
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
  showWebhooks(location.hash === "#/webhooks");
}

// showWebhooks opens the webhooks view in the place of a sandbox, or
// closes it.
function showWebhooks(open) {
  if (open === webhooks.shown) {
    return;
  }
  ui.webhooks.hidden = !open;
  if (open) {
    ui.webhooksLink.setAttribute("aria-current", "page");
    ui.empty.hidden = true;
    ui.app.dataset.view = "webhooks";
    document.title = "Webhooks — Sparkles";
    webhooks.show();
    if (narrow.matches) {
      ui.webhooksTitle.focus({ preventScroll: true });
    }
    return;
  }
  ui.webhooksLink.removeAttribute("aria-current");
  webhooks.hide();
  ui.empty.hidden = state.selected !== null;
  ui.app.dataset.view = state.selected ? "sandbox" : "list";
  if (!state.selected) {
    document.title = "Sparkles";
  }
}

function closeStream() {
  state.stream?.close();
  state.stream = null;
}

function openSandbox(id) {
  const left = state.selected;
  closeStream();
  hideNotice();
  transcript.clear();
  ui.earlier.hidden = true;
  delete ui.earlier.dataset.checked;
  ui.earlierStatus.textContent = "";
  state.earlierChecked = null;
  state.behindRead = null;
  state.snapshotSeen = false;
  state.missing = false;
  state.connError = null;
  state.selected = id;
  list.selected = id;
  list.render();
  workspace.show(id);
  ui.app.dataset.view = id ? "sandbox" : "list";
  ui.empty.hidden = id !== null;
  ui.sandbox.hidden = id === null;
  // On a phone the view changes under the keyboard: the focus goes to the
  // sandbox's name, or back to the row of the sandbox just left.
  if (!id) {
    document.title = "Sparkles";
    if (narrow.matches && left) {
      ui.list.querySelector(`.sb-item[data-sandbox-id="${CSS.escape(left)}"] a`)?.focus();
    }
    return;
  }
  if (narrow.matches) {
    ui.title.focus({ preventScroll: true });
  }
  list.want(id);
  renderHeader();
  setConnection(State.CONNECTING);
  state.stream = new SandboxEventStream({
    sandboxId: id,
    token: () => state.token,
    onSnapshot(snap, info) {
      list.remember(snap.sandbox);
      transcript.applySnapshot(snap, info);
      if (info.resumed || info.reset) {
        workspace.changed();
      }
      state.snapshotSeen = true;
      scrollToEnd(true);
      offerEarlier(id).catch(quietly);
      if (state.behindRead !== id || info.reset) {
        readBehind(id, snap).catch(quietly);
      }
      updateControls();
    },
    onEvent(env) {
      const stick = nearEnd();
      list.sawEvent(env);
      if (env.type === "sandbox.updated") {
        list.remember({ id, config: env.data.config });
      }
      transcript.applyEvent(env);
      scrollToEnd(stick);
      if (env.type === "turn.completed" || env.type === "workspace.reverted") {
        workspace.changed();
      }
    },
    onStatus(d) {
      list.remember({ id, status: d.status, status_detail: d.detail });
    },
    onGap() {
      showNotice("Retention removed some events of this sandbox before this page could read them; the view may miss them.");
    },
    onState: setConnection,
    onError(e) {
      if (e instanceof APIError && e.status === 404) {
        state.missing = true;
        renderBanner();
        updateControls();
        return;
      }
      state.connError = e;
      renderBanner();
      handleError(e);
    },
  }).start();
  updateControls();
}

function renderHeader() {
  const sb = openSandboxResource();
  const name = state.missing ? sb.id : list.name(sb.id);
  ui.title.textContent = name;
  ui.sandboxID.textContent = sb.id;
  ui.sandboxID.hidden = name === sb.id;
  ui.sandboxConfig.textContent = configWords(sb.config);
  ui.sandboxConfig.hidden = !ui.sandboxConfig.textContent;
  document.title = `${name} — Sparkles`;
  updateControls();
}

// renderBadge shows the open sandbox's state in the header as its list row
// shows it (sandboxState), with room to say more.
function renderBadge(sb, pending) {
  const st = state.missing ? { key: "missing", label: "not found", long: "not found" } : sandboxState(sb, pending);
  ui.status.className = `badge status-${st.key}`;
  ui.status.replaceChildren(h("span", { class: "badge-short", text: st.label }), h("span", { class: "badge-long", text: st.long }));
  // The status's detail explains that status, not a turn's.
  ui.status.title = (st.key === sb.status && sb.status_detail) || st.long;
}

const CONNECTION_TEXT = {
  [State.CONNECTING]: "Connecting…",
  [State.LIVE]: "Live",
  [State.RECONNECTING]: "Reconnecting…",
  [State.RECOVERING]: "Recovering…",
  [State.CLOSED]: "Disconnected",
};

function setConnection(s) {
  if (s === State.LIVE && (state.conn === State.RECONNECTING || state.conn === State.RECOVERING)) {
    // Back from an outage (a restart, maybe): the other rows are stale too.
    refreshList();
  }
  state.conn = s;
  ui.connection.dataset.state = s;
  ui.connectionText.textContent = CONNECTION_TEXT[s] ?? s;
  renderBanner();
  updateControls();
}

// renderBanner says loudly what keeps the page from working: the server
// is away, or the sandbox is not there.
function renderBanner() {
  let kind = "";
  let title = "";
  let text = "";
  if (state.missing) {
    kind = "missing";
    title = "This sandbox does not exist.";
    text = "It was never created here, or it was deleted and its log has aged out. Pick another sandbox, or create one.";
  } else if (state.conn === State.RECONNECTING) {
    kind = "reconnecting";
    title = "Reconnecting to the server…";
    text = "Sending is paused until the connection is back; what happened meanwhile shows up then.";
  } else if (state.conn === State.CLOSED && state.connError) {
    kind = "closed";
    title = "Disconnected.";
    text = `${state.connError.message} Reload the page to try again.`;
  }
  ui.offline.hidden = kind === "";
  ui.offline.dataset.kind = kind;
  ui.offlineTitle.textContent = title;
  ui.offlineText.textContent = text;
}

function updateControls() {
  const sb = openSandboxResource();
  const cur = transcript.current;
  const gone = !sb || sb.status === "deleted" || state.missing;
  const online = state.conn === State.LIVE;
  ui.send.disabled = gone || !online || cur !== null;
  ui.prompt.disabled = gone;
  ui.cancel.disabled = gone || !online || cur === null;
  ui.deleteSandbox.disabled = gone;
  transcript.setOffline(!online);
  transcript.setRevertable(!gone && online && cur === null);
  const pending = transcript.pending;
  if (sb) {
    list.setPending(sb.id, pending);
    renderBadge(sb, pending);
  }
  let text = "";
  if (state.missing) {
    text = "This sandbox does not exist.";
  } else if (gone && sb) {
    text = "This sandbox was deleted.";
  } else if (state.conn === State.RECONNECTING || state.conn === State.CLOSED) {
    text = "Not connected: sending is paused.";
  } else if (!online) {
    text = state.conn === State.RECOVERING ? "Catching up…" : "Connecting…";
  } else if (pending > 0) {
    text = pending === 1 ? "Waiting for your approval…" : `${pending} approvals wait for you…`;
  } else if (cur) {
    text = cur.status === "queued" ? "Turn queued…" : "Turn running…";
  } else if (sb?.status === "stopped") {
    text = `Agent ${statusWords("stopped").long}.`;
  } else if (sb && sb.status && sb.status !== "ready") {
    text = `Agent ${sb.status}…`;
  }
  ui.turnStatus.textContent = text;
  // An empty sandbox gets the guide, once its snapshot says it is empty.
  const empty = !gone && state.snapshotSeen && transcript.empty && ui.earlier.hidden;
  guide.show(empty ? sb : null);
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
    list.sawPrompt(state.selected, turn.input);
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

// ---- what the snapshot leaves out ----
//
// The snapshot shows the sandbox's current or last turn, and of its
// approvals only the pending ones. What became of the others, the turn's
// errors and how it ended are read from the end of the log; the turns
// before it are offered, and read as JSON pages when asked.

async function readBehind(id, snap) {
  state.behindRead = id;
  if (!snap.turn) {
    return;
  }
  // The reverts since the turn are read with it: they belong to no turn.
  const bounds = { last: snap.last_event_id, floor: snap.pruned_through };
  const [events, reverts] = await Promise.all([turnEvents(state.api, id, snap.turn.id, bounds), revertsAfter(state.api, id, snap.turn.id, bounds)]);
  if (state.selected !== id) {
    return;
  }
  for (const env of [...events, ...reverts]) {
    transcript.applyBehind(env);
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
  const first = await firstTurn(state.api, id);
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
    await earlierEvents(state.api, id, (env) => transcript.applyEarlier(env), () => state.selected === id);
    if (state.selected !== id) {
      return;
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
ui.introCreate.addEventListener("click", createSandbox);
ui.showDeleted.addEventListener("change", () => {
  list.showDeleted = ui.showDeleted.checked;
  list.render();
});
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
document.addEventListener("visibilitychange", refreshList);
// A phone's prompt box has two lines: room for the question, not the hint.
const placeholder = () => {
  ui.prompt.placeholder = narrow.matches ? "Ask the agent…" : "Ask the agent… (Enter sends, Shift+Enter starts a new line)";
};
narrow.addEventListener("change", placeholder);
placeholder();

takeTokenFromAddress();
const saved = sessionStorage.getItem(TOKEN_KEY);
if (saved) {
  signIn(saved);
} else {
  showLogin();
}
