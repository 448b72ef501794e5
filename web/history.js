// history.js reads a sandbox's log as JSON pages for what the stream's
// snapshot does not hold: the turns before the snapshot's, what became of
// the snapshot turn's approvals, and a sandbox's first prompt.
//
// The events API reads forward from a cursor, and the cursor is an event
// id; ids only grow. So the end of the log is read by asking for the events
// after an id somewhat below the last one, and further back in growing
// windows until the turn's start is in view.

// firstTurnStart returns the first turn.started event within the log's first
// `limit` events, or null, and whether the log holds turns at all there (a
// turn whose start retention removed still shows by its other events).
export async function firstTurnStart(api, id, limit = 20) {
  const page = await api.events(id, "0", limit);
  const ev = page.data.find((e) => e.type === "turn.started") ?? null;
  return { started: ev, turns: page.data.some((e) => e.turn_id) };
}

// firstTurn returns the turn of the log's first event that has one, or null.
export async function firstTurn(api, id) {
  let since = "0";
  for (;;) {
    const page = await api.events(id, since, 100);
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

// readRange returns the events with ids in (lo, hi], in order.
async function readRange(api, id, lo, hi) {
  const out = [];
  let since = lo;
  for (;;) {
    const page = await api.events(id, since.toString(), 500);
    for (const env of page.data) {
      if (BigInt(env.id) > hi) {
        return out;
      }
      out.push(env);
    }
    if (!page.has_more || page.data.length === 0) {
      return out;
    }
    since = BigInt(page.next_since);
  }
}

// FIRST_WINDOW is how many ids below the last one the read of a turn's
// events starts; a turn without long streamed text fits in it, so one page
// is the usual cost. Each further window is four times the one before.
const FIRST_WINDOW = 256n;

// turnEvents returns the events of turn turnID with ids up to last, read
// from the end of the log backwards until the turn's turn.started (or an
// event of an earlier turn, or the start of what retention kept) is reached.
// floor is the log's pruned_through: no cursor below it is answered.
export async function turnEvents(api, id, turnID, { last, floor = 0 }) {
  let hi = BigInt(last ?? 0);
  const low = BigInt(floor ?? 0);
  let span = FIRST_WINDOW;
  const windows = [];
  while (hi > low) {
    const lo = hi - span > low ? hi - span : low;
    const got = await readRange(api, id, lo, hi);
    windows.unshift(got);
    const reached = got.some((e) => (e.type === "turn.started" && e.turn_id === turnID) || (e.turn_id && e.turn_id !== turnID));
    if (reached) {
      break;
    }
    hi = lo;
    span *= 4n;
  }
  return windows.flat().filter((e) => e.turn_id === turnID);
}

// earlierEvents calls apply with each event of the log in order, until
// apply returns false or the log ends; it stops early when stillWanted()
// turns false (the user opened another sandbox).
export async function earlierEvents(api, id, apply, stillWanted) {
  let since = "0";
  for (;;) {
    const page = await api.events(id, since, 500);
    if (!stillWanted()) {
      return;
    }
    for (const env of page.data) {
      if (!apply(env)) {
        return;
      }
    }
    if (!page.has_more) {
      return;
    }
    since = page.next_since;
  }
}
