// A small offline reader for the app's OpenAPI schema (FastAPI's own /docs page loads Swagger UI
// from a CDN, which a machine without network cannot reach).
"use strict";

const mk = (tag, cls, text) => {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
};

function resolve(spec, schema) {
  let s = schema || {};
  for (let i = 0; i < 8 && s.$ref; i++) s = s.$ref.split("/").slice(1).reduce((o, k) => o[k], spec);
  return s;
}

function typeOf(spec, schema) {
  const s = resolve(spec, schema);
  if (s.anyOf) return s.anyOf.map((x) => typeOf(spec, x)).join(" | ");
  if (s.type === "array") return `${typeOf(spec, s.items)}[]`;
  return s.type || s.title || "object";
}

function limits(s) {
  const bits = [];
  for (const [k, label] of [["minLength", "min length"], ["maxLength", "max length"], ["minimum", "≥"], ["maximum", "≤"], ["default", "default"]]) {
    if (s[k] !== undefined && s[k] !== null) bits.push(`${label} ${JSON.stringify(s[k])}`);
  }
  return bits.join(", ");
}

function fieldsTable(spec, schema) {
  const s = resolve(spec, schema);
  if (!s.properties) return mk("p", "note", typeOf(spec, schema));
  const t = mk("table", "fields");
  const head = mk("tr");
  ["field", "type", "limits", "description"].forEach((h) => head.appendChild(mk("th", "", h)));
  t.appendChild(head);
  for (const [name, p] of Object.entries(s.properties)) {
    const r = mk("tr");
    const req = (s.required || []).includes(name);
    r.appendChild(mk("td", "mono", name + (req ? " *" : "")));
    r.appendChild(mk("td", "mono", typeOf(spec, p)));
    r.appendChild(mk("td", "", limits(resolve(spec, p))));
    r.appendChild(mk("td", "", p.description || ""));
    t.appendChild(r);
  }
  return t;
}

async function main() {
  const box = document.getElementById("docs");
  const spec = await (await fetch("/openapi.json")).json();
  box.replaceChildren();
  const intro = mk("section", "card");
  intro.appendChild(mk("h2", "", `${spec.info.title} ${spec.info.version}`));
  intro.appendChild(mk("p", "note", spec.info.description || ""));
  box.appendChild(intro);
  for (const [path, ops] of Object.entries(spec.paths)) {
    for (const [method, op] of Object.entries(ops)) {
      const c = mk("section", "card");
      const h = mk("h2", "");
      h.appendChild(mk("span", "verb " + method, method.toUpperCase()));
      h.appendChild(mk("span", "mono", " " + path));
      c.appendChild(h);
      c.appendChild(mk("p", "note", op.summary || ""));
      for (const p of op.parameters || []) {
        c.appendChild(mk("p", "", `query ${p.name}${p.required ? " (required)" : ""}: ${typeOf(spec, p.schema)} ${limits(p.schema || {})}`));
      }
      const body = op.requestBody && op.requestBody.content["application/json"];
      if (body) { c.appendChild(mk("h3", "", "JSON body")); c.appendChild(fieldsTable(spec, body.schema)); }
      const codes = Object.keys(op.responses || {}).join(", ");
      c.appendChild(mk("p", "note", `responses: ${codes}; errors are {"detail": [{"loc", "msg", "type"}]}`));
      box.appendChild(c);
    }
  }
}

document.addEventListener("DOMContentLoaded", () => main().catch((e) => {
  document.getElementById("docs").replaceChildren(mk("p", "status error", `cannot read /openapi.json: ${e.message}`));
}));
