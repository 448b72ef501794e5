// A webhook receiver that verifies each delivery with the npm
// standardwebhooks package, an implementation of the Standard Webhooks
// scheme independent of the server's. It listens on 127.0.0.1 and prints
// {"listening": PORT}, then one JSON line per request:
// {"webhook_id", "body"} for a verified one, answered 204, and
// {"rejected", "error"} for any other, answered 401. The signing secret
// comes on stdin, one line (the latest line is the secret); until the
// first, requests are answered 503.
//
// STANDARDWEBHOOKS names the folder of the installed package.
import { createServer } from "node:http";
import { createRequire } from "node:module";
import { createInterface } from "node:readline";

const dir = process.env.STANDARDWEBHOOKS;
if (!dir) {
  console.error("receiver.mjs: set STANDARDWEBHOOKS to the folder of the standardwebhooks package");
  process.exit(2);
}
const { Webhook } = createRequire(import.meta.url)(dir);

let webhook = null;
createInterface({ input: process.stdin }).on("line", (line) => {
  if (line.trim() !== "") webhook = new Webhook(line.trim());
});

const print = (obj) => process.stdout.write(JSON.stringify(obj) + "\n");

const server = createServer((req, res) => {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    if (webhook === null) {
      res.writeHead(503).end();
      return;
    }
    const payload = Buffer.concat(chunks).toString("utf8");
    let body;
    try {
      body = webhook.verify(payload, req.headers);
    } catch (e) {
      print({ rejected: req.headers["webhook-id"] ?? "", error: String(e.message) });
      res.writeHead(401).end();
      return;
    }
    print({ webhook_id: req.headers["webhook-id"], body });
    res.writeHead(204).end();
  });
});
server.listen(0, "127.0.0.1", () => print({ listening: server.address().port }));
