// Checks that sparkles-events.d.ts declares what sparkles-events.js
// exports: the same values, the same public members of each class, the
// same State values. tsc checks code against the declarations
// (TestTypeScript); this checks the declarations against the code.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";

import * as events from "./sparkles-events.js";

const dts = await readFile(new URL("./sparkles-events.d.ts", import.meta.url), "utf8");

// members returns the names declared in the body of `export class name`.
function members(name) {
  const m = dts.match(new RegExp(`export class ${name}\\b[^{]*\\{([\\s\\S]*?)\\n\\}`));
  assert.ok(m, `the declarations have no class ${name}`);
  const out = new Set();
  for (const line of m[1].split("\n")) {
    const d = line.match(/^\s+(?:static\s+)?(?:readonly\s+)?(\w+)\s*[(:]/);
    if (d && d[1] !== "constructor") {
      out.add(d[1]);
    }
  }
  return [...out].sort();
}

// publicMembers lists a class's own prototype members and static ones.
function publicMembers(cls, ...own) {
  const proto = Object.getOwnPropertyNames(cls.prototype).filter((n) => n !== "constructor");
  const statics = Object.getOwnPropertyNames(cls).filter((n) => !["length", "name", "prototype"].includes(n));
  return [...new Set([...proto, ...statics, ...own])].sort();
}

test("the declarations match the module", async (t) => {
  await t.test("Exports", () => {
    const declared = [...dts.matchAll(/^export (?:declare )?(?:class|const|function) (\w+)/gm)].map((m) => m[1]).sort();
    assert.deepEqual(declared, Object.keys(events).sort());
  });
  await t.test("SandboxEventStream", () => {
    assert.deepEqual(members("SandboxEventStream"), publicMembers(events.SandboxEventStream));
  });
  await t.test("SSEParser", () => {
    assert.deepEqual(members("SSEParser"), publicMembers(events.SSEParser));
  });
  await t.test("APIError", () => {
    // Instance fields are set in the constructor; name comes from it too.
    const e = new events.APIError(410, "cursor_pruned", "gone", {});
    assert.deepEqual(members("APIError"), publicMembers(events.APIError, ...Object.keys(e), "name"));
  });
  await t.test("State", () => {
    const block = dts.match(/export declare const State: Readonly<\{([\s\S]*?)\}>/);
    assert.ok(block, "the declarations have no State");
    const declared = Object.fromEntries([...block[1].matchAll(/(\w+): "(\w+)"/g)].map((m) => [m[1], m[2]]));
    assert.deepEqual(declared, { ...events.State });
    const union = dts.match(/export type StreamState = ([^;]+);/);
    assert.deepEqual(union[1].split("|").map((s) => s.trim().replaceAll('"', "")).sort(), Object.values(events.State).sort());
  });
});
