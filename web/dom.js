// dom.js holds the page's small DOM helpers and the words it uses for
// statuses and times, shared by the list, the transcript and the page.

// h creates an element. props sets text (textContent), class (className),
// hidden, and any other attribute; children are nodes or strings.
export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (v === undefined || v === null || v === false) {
      continue;
    }
    if (k === "text") {
      el.textContent = v;
    } else if (k === "class") {
      el.className = v;
    } else if (k === "hidden") {
      el.hidden = true;
    } else {
      el.setAttribute(k, v === true ? "" : String(v));
    }
  }
  for (const c of children) {
    el.append(c);
  }
  return el;
}

// insertSorted puts el into parent before the first child whose key sorts
// after key, so that the order of a list does not depend on arrival order.
export function insertSorted(parent, el, key) {
  el.dataset.key = key;
  for (const c of parent.children) {
    if (c.dataset.key > key) {
      parent.insertBefore(el, c);
      return;
    }
  }
  parent.append(el);
}

// inputText is the text of a turn's input ([{type: "text", text}]).
export const inputText = (input) => (input ?? []).map((i) => i.text ?? "").join("\n");

// STATUS_WORDS are the sandbox statuses as the page says them, where the
// contract's word would mislead: a stopped agent is not broken, it is idle
// and boots again with the next prompt.
const STATUS_WORDS = {
  stopped: { label: "idle", long: "idle — starts with the next prompt" },
};

// statusWords returns {label, long} for a sandbox status: label for a badge,
// long for where there is room to explain.
export function statusWords(status) {
  return STATUS_WORDS[status] ?? { label: status || "…", long: status || "" };
}

// sandboxState is the one state the page shows for a sandbox, in the header
// and in its list row alike: an approval that waits for an answer first (the
// page knows of those only in the open sandbox: pending), then a turn that
// runs or waits to, then the sandbox's own status. It returns {key, label,
// long}: key names the badge's colour (status-<key>), label is for a badge,
// long for where there is room to explain.
export function sandboxState(sb, pending = 0) {
  const status = sb?.status ?? "";
  if (status === "deleted") {
    return { key: "deleted", label: "deleted", long: "deleted" };
  }
  if (pending > 0) {
    const long = pending === 1 ? "running — waiting for your approval" : `running — ${pending} approvals wait for you`;
    return { key: "pending", label: "waiting", long };
  }
  const turn = sb?.current_turn?.status;
  if (turn === "running") {
    return { key: "running", label: "running", long: "running a turn" };
  }
  if (turn === "queued") {
    return { key: "queued", label: "queued", long: "a turn is queued" };
  }
  return { key: status || "unknown", ...statusWords(status) };
}

// ago says how long before now t was, in words ("just now", "5 min ago").
export function ago(t, now = Date.now()) {
  const ms = now - Date.parse(t);
  if (!Number.isFinite(ms)) {
    return "";
  }
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 45) {
    return "just now";
  }
  const min = Math.round(s / 60);
  if (min < 60) {
    return `${min} min ago`;
  }
  const hours = Math.round(min / 60);
  if (hours < 24) {
    return `${hours} h ago`;
  }
  const days = Math.round(hours / 24);
  if (days === 1) {
    return "yesterday";
  }
  if (days < 30) {
    return `${days} days ago`;
  }
  return new Date(t).toLocaleDateString();
}
