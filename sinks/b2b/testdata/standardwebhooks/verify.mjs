// Runs the Standard Webhooks reference verifier (npm standardwebhooks, the
// version package.json pins) on requests that sinks/b2b tests captured.
// stdin: a JSON array of {"secret": "whsec_…", "headers": {name: value},
// "body": base64}; header names are lower case, as Node's http module
// gives them. stdout: a JSON array with, for each request, "" when
// Webhook.verify accepts it, else the error it throws.
import { Webhook } from "standardwebhooks";

let input = "";
for await (const chunk of process.stdin) input += chunk;
const results = JSON.parse(input).map(({ secret, headers, body }) => {
  try {
    new Webhook(secret).verify(Buffer.from(body, "base64"), headers);
    return "";
  } catch (err) {
    return `${err.name}: ${err.message}`;
  }
});
process.stdout.write(JSON.stringify(results));
