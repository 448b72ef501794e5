// guide.js shows an empty sandbox what to do: a line on what happens and
// prompts to start from, the demo agent's own words when it runs one.
import { h } from "./dom.js";

// DEMO_EXAMPLES are the words the demo agent follows (agent/demo.go).
const DEMO_EXAMPLES = [
  ["write notes.txt", "asks you, then writes the file"],
  ["read README.md", "reads a file and sums it up"],
  ["slow", "streams its answer in small pieces"],
  ["hang", "keeps working until you cancel the turn"],
  ["env", "shows the environment it runs with"],
  ["crash", "exits; the next prompt starts it again"],
];
const EXAMPLE = ["List the files in this directory and tell me what this project is.", ""];

// Guide fills the guide's elements ({el, text, examples}); pick(prompt) is
// called with the example the user chose.
export class Guide {
  #ui;
  #pick;
  #for = null; // the sandbox and agent the examples are for

  constructor(ui, pick) {
    this.#ui = ui;
    this.#pick = pick;
  }

  // show shows the guide for sandbox sb, or hides it when sb is null.
  show(sb) {
    this.#ui.el.hidden = !sb;
    if (!sb || this.#for === `${sb.id} ${sb.agent}`) {
      return;
    }
    this.#for = `${sb.id} ${sb.agent}`;
    const demo = sb.agent === "demo";
    this.#ui.text.textContent = demo
      ? "This sandbox runs the demo agent: a script, no model. A word in the prompt steers it; pick one to put it in the prompt box."
      : "Send the agent a prompt below. It works in this sandbox's own directory and asks you here before it writes or runs anything. For example:";
    this.#ui.examples.replaceChildren(
      ...(demo ? DEMO_EXAMPLES : [EXAMPLE]).map(([prompt, what]) => {
        const b = h(
          "button",
          { type: "button", class: "example", "aria-label": `Use the prompt: ${prompt}`, "data-prompt": prompt },
          h("code", { text: prompt }),
          what ? h("span", { class: "example-what", text: what }) : "",
        );
        b.addEventListener("click", () => this.#pick(prompt));
        return h("li", {}, b);
      }),
    );
  }
}
