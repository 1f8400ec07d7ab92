// Parses an AsyncAPI document with the official parser (@asyncapi/parser, pinned in
// package.json) and prints, as JSON, its diagnostics and what the document holds:
// servers, channels, operations, messages and security schemes, $refs resolved.
// Usage: node parse.mjs PATH. Exit 2 when the file cannot be read at all.
import { Parser, fromFile } from '@asyncapi/parser';

const SEVERITY = ['error', 'warning', 'information', 'hint'];
const path = process.argv[2];
if (!path) {
  console.error('usage: node parse.mjs PATH');
  process.exit(2);
}

const ids = (collection) => collection.all().map((item) => item.id());
// The parser resolves a security requirement's $ref and loses the scheme's id: the
// schemes name their role in an extension (x-hcat-role) instead.
const roles = (security) =>
  security.map((requirements) => requirements.all().map((r) => r.scheme().json()['x-hcat-role']));

function summary(document) {
  const servers = Object.fromEntries(
    document.servers().all().map((s) => [
      s.id(),
      { protocol: s.protocol(), host: s.host(), security: roles(s.security()) },
    ]),
  );
  const channels = Object.fromEntries(
    document.channels().all().map((c) => [
      c.id(),
      {
        address: c.address(),
        parameters: ids(c.parameters()),
        servers: ids(c.servers()),
        messages: c.messages().all().map((m) => m.name()),
      },
    ]),
  );
  const operations = Object.fromEntries(
    document.operations().all().map((o) => [
      o.id(),
      {
        action: o.action(),
        channels: ids(o.channels()),
        messages: o.messages().all().map((m) => m.name()),
        security: roles(o.security()),
      },
    ]),
  );
  const messages = Object.fromEntries(
    document.components().messages().all().map((m) => [
      m.id(),
      {
        name: m.name(),
        contentType: m.contentType(),
        // a webhook message: the subscription format that sends it
        format: m.json()['x-hcat-format'] ?? null,
        headers: m.hasHeaders() ? m.headers().json() : null,
        payload: m.hasPayload() ? m.payload().json() : null,
        examples: m.examples().length,
      },
    ]),
  );
  const securitySchemes = Object.fromEntries(
    document.components().securitySchemes().all().map((s) => [
      s.id(),
      { type: s.type(), role: s.json()['x-hcat-role'] },
    ]),
  );
  return { version: document.version(), servers, channels, operations, messages, securitySchemes };
}

let parsed;
try {
  parsed = await fromFile(new Parser(), path).parse();
} catch (error) {
  console.error(`cannot parse ${path}: ${error.message}`);
  process.exit(2);
}
const diagnostics = parsed.diagnostics.map((d) => ({
  severity: SEVERITY[d.severity] ?? String(d.severity),
  code: d.code,
  message: d.message,
  path: d.path.join('/'),
}));
const document = parsed.document ? summary(parsed.document) : null;
process.stdout.write(JSON.stringify({ diagnostics, document }) + '\n');
