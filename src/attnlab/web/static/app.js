// attnlab attention explorer: plain JS, no dependencies. Every label is set with textContent (never
// innerHTML), so tokens coming from a model cannot inject markup.
"use strict";

// ------------------------------------------------------------------------------ the page's language

// The page's teaching text comes from the CLI's one catalogue (attnlab/locale/<lang>/…/attnlab.po), sent
// by GET /api/messages in the server's language (`attnlab serve --lang zh`) or the page's ?lang=.
// t(message, {name: value}) is a message (a double-quoted English literal) in that language with its
// {name} fields filled; N_(message) marks a constant translated where it is shown; index.html marks its
// text with data-i18n (web/page_text.py finds every marked message; the tests check each is translated).
let MESSAGES = {};
const N_ = (msg) => msg;
function t(msg, vals) {
  const s = Object.prototype.hasOwnProperty.call(MESSAGES, msg) ? MESSAGES[msg] : msg;
  return vals ? s.replace(/\{(\w+)\}/g, (m, k) => (k in vals ? String(vals[k]) : m)) : s;
}

async function loadMessages() {
  const lang = new URLSearchParams(window.location.search).get("lang");
  try {
    const data = await api("/api/messages" + (lang ? `?lang=${encodeURIComponent(lang)}` : ""));
    MESSAGES = data.messages || {};
    document.documentElement.lang = data.lang;
  } catch (e) {
    setStatus(e.message, "error");  // an unknown ?lang= is said once; the page stays in English
  }
}

// Once, at load: each marked element's text (whitespace collapsed, as page_text.py reads it) and each
// marked attribute, replaced by its translation.
function translatePage() {
  document.querySelectorAll("[data-i18n]").forEach((e) => { e.textContent = t(e.textContent.replace(/\s+/g, " ").trim()); });
  document.querySelectorAll("[data-i18n-attrs]").forEach((e) => {
    for (const a of e.dataset.i18nAttrs.split(/\s+/)) if (e.hasAttribute(a)) e.setAttribute(a, t(e.getAttribute(a)));
  });
}

const $ = (sel) => document.querySelector(sel);
const el = (tag, cls, text) => {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
};
const SVG_NS = "http://www.w3.org/2000/svg";
const svgEl = (tag, attrs) => {
  const e = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  return e;
};

// <pad> positions the page asks for after the source's <eos> (the request's `pad`), so the padding
// columns the notes' §23 talks about are on screen, with their weight of exactly 0.
const PAD_SHOWN = 2;
const TOKEN_NOTES = {  // what one token of a side is (/api/runs' pair.src_tokens, pair.tgt_tokens); {lang}: that side's language
  bpe: N_("Tokens are BPE pieces, one per row or column: “·son” continues the word before it (mai ·son = maison)."),
  metaspace: N_("{lang} tokens are whole words and punctuation marks, one per row or column: “·” marks one written with no space before it (tea ·. = tea.)."),
  characters: N_("{lang} tokens are single characters, one per row or column (a run of Latin letters or digits stays one token)."),
};
const KIND_NOTES = {  // {pad}: PAD_SHOWN; {src}, {tgt}: the run's languages
  cross: N_("Cross-attention (notes §1–2, §25): each row is one generated {tgt} token; it shows how much the decoder looked at each {src} source token when producing it. A good model draws a near-diagonal alignment. The last {pad} columns are <pad> (a batch's padding): they get exactly 0 weight."),
  enc_self: N_("Encoder self-attention (notes §12, §23): every source token looks at every source token, in both directions, all at once (no decoding steps). The last {pad} columns are <pad>, as in a batch beside a longer sentence: masked_softmax gives them exactly 0 weight."),
  dec_self: N_("Decoder masked self-attention (notes §18, §24): a token may only look at itself and earlier tokens, so the map is lower-triangular."),
  self: N_("Decoder-only self-attention (notes §28): one causal map over “source <eos> <bos> target”; the target rows reading the source columns play the role of cross-attention."),
};
const KIND_SHORT = {
  cross: N_("cross"), enc_self: N_("encoder self"), dec_self: N_("decoder self (masked)"), self: N_("self (decoder-only)"),
};
const kindName = (k) => (KIND_SHORT[k] ? t(KIND_SHORT[k]) : k);

// A perceptual blue ramp (ColorBrewer Blues, light → dark).
const RAMP = [[247, 251, 255], [198, 219, 239], [107, 174, 214], [33, 113, 181], [8, 48, 107]];
function color(w) {
  const x = Math.max(0, Math.min(1, w)) * (RAMP.length - 1);
  const i = Math.min(RAMP.length - 2, Math.floor(x));
  const f = x - i;
  const c = RAMP[i].map((v, k) => Math.round(v + (RAMP[i + 1][k] - v) * f));
  return `rgb(${c[0]}, ${c[1]}, ${c[2]})`;
}

const state = {
  runs: [], limits: {}, result: null, kind: null, layer: -1, head: "mean", step: 0, playing: null,  // layer -1: the last
  probes: null, probePlaying: null, requestId: 0, query: null,
};
const KIND_ORDER = ["cross", "self", "enc_self", "dec_self"];

// ------------------------------------------------------------------------------------------ API

async function api(path, body) {
  const opts = body === undefined ? {} : {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
  };
  const res = await fetch(path, opts);
  let data = null;
  try { data = await res.json(); } catch (e) { data = null; }
  if (!res.ok) {
    const d = data && data.detail;
    let msg = `${res.status} ${res.statusText}`;
    if (Array.isArray(d)) msg = d.map((x) => `${(x.loc || []).filter((p) => p !== "body").join(".") || "request"}: ${x.msg}`).join("; ");
    else if (typeof d === "string") msg = d;
    throw new Error(msg);
  }
  return data;
}

function setStatus(text, kind) {
  const s = $("#status");
  s.textContent = text || "";
  s.className = "status" + (kind ? " " + kind : "");
  s.setAttribute("role", kind === "error" ? "alert" : "status");
}

// ------------------------------------------------------------------------------------- matrices

// The server sends only what the page shows (one kind, one layer, one head or the heads' mean), as
// base64 of round(w × scale) — or JSON numbers — shaped (layers', heads', queries, keys).
function unpack(data, shape, encoding, scale) {
  if (encoding === "json" || !encoding) return data;
  const bin = atob(data);
  const bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  const view = new DataView(bytes.buffer);
  const wide = encoding === "uint16";
  const [L, H, Q, K] = shape;
  let p = 0;
  const out = [];
  for (let l = 0; l < L; l++) {
    const layer = [];
    for (let h = 0; h < H; h++) {
      const m = [];
      for (let q = 0; q < Q; q++) {
        const row = new Array(K);
        for (let k = 0; k < K; k++, p++) row[k] = (wide ? view.getUint16(2 * p, true) : bytes[p]) / scale;
        m.push(row);
      }
      layer.push(m);
    }
    out.push(layer);
  }
  return out;
}

// The one matrix of a response's selection (its first layer and head), or null when omitted.
function matrixOf(att) {
  if (att.weights === null || att.weights === undefined) return null;
  if (!att.matrix) att.matrix = unpack(att.weights, att.shape, att.encoding, att.scale)[0][0];
  return att.matrix;
}

// The request body for the run's view: the kind, layer and head the page shows, plus thumbnails.
function viewBody(query, kind, layer, head, overview, pad) {
  const body = { text: query.text, beam_size: query.beam_size, run: query.run, encoding: "uint16", pad: pad || 0 };
  if (kind) Object.assign(body, { kind, layer, head, overview: !!overview });
  return body;
}

function runInfo(name) { return state.runs.find((x) => x.name === name) || { kinds: [], num_heads: 1, attention_layers: 1 }; }

// The run's language pair (GET /api/runs `pair`): every run speaks its own, so runs of both directions
// can be served side by side. Names come in English and are shown in the page's language.
function pairOf(run) { return (run && run.pair) || { src: "?", tgt: "?", src_name: "?", tgt_name: "?", examples: [] }; }
function pairNames(run) { const p = pairOf(run); return { src: t(p.src_name), tgt: t(p.tgt_name) }; }
// The note on what the map's tokens are, from the run's tokenizer kind per side (the server's token_kinds):
// BPE pieces, metaspace words or characters; D2L's and Moses' words are shown as they are and need none.
function tokenNote(run) {
  const p = pairOf(run), names = pairNames(run);
  const sides = [[p.src_tokens, names.src], [p.tgt_tokens, names.tgt]].filter(([kind]) => TOKEN_NOTES[kind]);
  if (sides.some(([kind]) => kind === "bpe")) return t(TOKEN_NOTES.bpe);  // one subword model per language: both sides
  const notes = new Map();  // one note per kind: "English and French tokens …" reads as two of the same
  for (const [kind, lang] of sides) notes.set(kind, [...(notes.get(kind) || []), lang]);
  return [...notes].map(([kind, langs]) => t(TOKEN_NOTES[kind], { lang: langs.join(" / ") })).join(" ");
}
const langTag = (code) => String(code || "?").toUpperCase();

// Pick a kind/layer/head the run has, keeping the current choice where it can.
function fitSelection(run) {
  const kinds = [...(run.kinds || [])].sort((a, b) => KIND_ORDER.indexOf(a) - KIND_ORDER.indexOf(b));
  if (!kinds.includes(state.kind)) state.kind = kinds[0] || null;
  const layers = Math.max(1, run.attention_layers || 1), heads = Math.max(1, run.num_heads || 1);
  state.layer = state.layer < 0 ? -1 : Math.min(state.layer, layers - 1);  // -1 (the last) until one is picked
  if (heads === 1) state.head = 0;
  else if (state.head !== "mean" && state.head >= heads) state.head = "mean";
}

function rowLabels(att, res) {
  // Cross rows are named by the token they produced; self-attention rows by the query token itself.
  if (att.outputs && !att.keys.every((k, i) => k === att.queries[i])) return labels(res, att.outputs.map((o, i) => o || att.queries[i]));
  return labels(res, att.queries);
}

// Tokens as a reader sees them: the response's token_labels (attnlab.maps.display_tokens, the one rule:
// BPE's or the metaspace rule's "▁je" → "je", "son" → "·son"), for translations and probe recordings alike.
function labels(res, tokens) {
  const map = (res && res.token_labels) || {};
  return tokens.map((tok) => (Object.prototype.hasOwnProperty.call(map, tok) ? map[tok] : tok));
}

// --------------------------------------------------------------------------------------- heatmap

// Draws a grid: one .hm-row per query (role=row) holding one .hm-cell per key (role=gridcell).
function renderHeatmap(box, m, rows, cols, opts) {
  opts = opts || {};
  box.replaceChildren();
  const nk = cols.length;
  const cell = opts.cell || Math.max(16, Math.min(52, Math.floor(520 / Math.max(1, nk))));
  box.style.setProperty("--cell", cell + "px");
  const head = el("div", "hm-colheads");
  head.setAttribute("role", "row");
  head.appendChild(el("div", "hm-corner", opts.corner || ""));
  cols.forEach((c, j) => {
    const h = el("div", "hm-colhead", c);
    h.setAttribute("role", "columnheader");
    h.dataset.col = j;
    h.title = c;
    head.appendChild(h);
  });
  box.appendChild(head);
  m.forEach((r, i) => {
    const row = el("div", "hm-row");
    row.setAttribute("role", "row");
    row.dataset.row = i;
    row.dataset.token = rows[i];
    const lab = el("div", "hm-label", rows[i]);
    lab.setAttribute("role", "rowheader");
    lab.title = rows[i];
    row.appendChild(lab);
    r.forEach((w, j) => {
      const c = el("div", "hm-cell");
      c.setAttribute("role", "gridcell");
      c.dataset.row = i;
      c.dataset.col = j;
      c.dataset.weight = w.toFixed(4);
      c.style.background = color(w);
      if (w > 0.55) c.classList.add("dark");
      c.setAttribute("aria-label", `${rows[i]} → ${cols[j]}: ${w.toFixed(2)}`);
      if (opts.numbers && cell >= 26) c.textContent = weightText(w);
      if (opts.tooltip !== false) {
        c.addEventListener("mouseenter", (ev) => showTip(ev, rows[i], cols[j], w, opts.describe && opts.describe(i, j)));
        c.addEventListener("mouseleave", hideTip);
      }
      row.appendChild(c);
    });
    box.appendChild(row);
  });
}

// A weight on the legend's scale, 0 to 1, short enough for a cell: ".37", "0", "1" (notes §23's heatmaps).
function weightText(w) {
  const two = w.toFixed(2);
  return two === "0.00" ? "0" : two === "1.00" ? "1" : two.replace(/^0/, "");
}

function showTip(ev, q, k, w, extra) {
  const tip = $("#tooltip");
  tip.replaceChildren(
    el("span", "tip-q", q), el("span", "tip-arrow", " → "), el("span", "tip-k", k),
    el("span", "tip-w", `  ${w.toFixed(3)}`),
  );
  if (extra) tip.appendChild(el("div", "tip-extra", extra));
  tip.hidden = false;
  const r = ev.target.getBoundingClientRect();
  const x = Math.min(window.innerWidth - tip.offsetWidth - 8, r.left + r.width / 2 - tip.offsetWidth / 2);
  tip.style.left = Math.max(8, x) + window.scrollX + "px";
  tip.style.top = r.top + window.scrollY - tip.offsetHeight - 8 + "px";
}
function hideTip() { $("#tooltip").hidden = true; }

// ------------------------------------------------------------------------------------- alignment

// bertviz-style head view: queries on the left, keys on the right, one line per pair.
function renderAlignment(svg, m, rows, cols, onlyRow) {
  svg.replaceChildren();
  const lineH = 24, top = 30, width = 360, xl = 120, xr = width - 120;
  const n = Math.max(rows.length, cols.length);
  const height = top + n * lineH + 10;
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("height", height);
  svg.appendChild(svgEl("text", { x: xl - 8, y: 14, "text-anchor": "end", class: "al-head" })).textContent = t("query");
  svg.appendChild(svgEl("text", { x: xr + 8, y: 14, class: "al-head" })).textContent = t("key");
  const yq = (i) => top + i * lineH + lineH / 2;
  const yk = (j) => top + j * lineH + lineH / 2;
  const lines = svgEl("g", { class: "al-lines" });
  svg.appendChild(lines);
  m.forEach((r, i) => r.forEach((w, j) => {
    if (w < 0.02) return;
    const line = svgEl("line", {
      x1: xl, y1: yq(i), x2: xr, y2: yk(j), "stroke-width": (0.6 + 7 * w).toFixed(2),
      "stroke-opacity": Math.min(1, 0.12 + w).toFixed(3), "data-row": i, "data-col": j, class: "al-line",
    });
    if (onlyRow !== null && onlyRow !== undefined && i !== onlyRow) line.classList.add("faded");
    lines.appendChild(line);
  }));
  const words = svgEl("g", { class: "al-words" });
  svg.appendChild(words);
  const focus = (attr, idx) => {
    lines.querySelectorAll(".al-line").forEach((l) => l.classList.toggle("faded", l.dataset[attr] !== String(idx)));
  };
  const reset = () => {
    lines.querySelectorAll(".al-line").forEach((l) => l.classList.toggle(
      "faded", onlyRow !== null && onlyRow !== undefined && l.dataset.row !== String(onlyRow)));
  };
  rows.forEach((tok, i) => {
    const tx = svgEl("text", { x: xl - 8, y: yq(i) + 4, "text-anchor": "end", class: "al-word al-q", tabindex: 0 });
    tx.textContent = tok;
    if (onlyRow === i) tx.classList.add("current");
    tx.addEventListener("mouseenter", () => focus("row", i));
    tx.addEventListener("focus", () => focus("row", i));
    tx.addEventListener("mouseleave", reset);
    tx.addEventListener("blur", reset);
    words.appendChild(tx);
  });
  cols.forEach((tok, j) => {
    const tx = svgEl("text", { x: xr + 8, y: yk(j) + 4, class: "al-word al-k", tabindex: 0 });
    tx.textContent = tok;
    tx.addEventListener("mouseenter", () => focus("col", j));
    tx.addEventListener("focus", () => focus("col", j));
    tx.addEventListener("mouseleave", reset);
    tx.addEventListener("blur", reset);
    words.appendChild(tx);
  });
}

// --------------------------------------------------------------------------------------- overview

function renderOverview(att) {
  const box = $("#overview");
  box.replaceChildren();
  if (!att.overview) return;
  const thumbs = unpack(att.overview.data, att.overview.shape, att.overview.encoding, att.overview.scale);
  box.style.setProperty("--heads", att.heads);
  const corner = el("div", "ov-corner");
  box.appendChild(corner);
  for (let h = 0; h < att.heads; h++) box.appendChild(el("div", "ov-colhead", t("head {n}", { n: h + 1 })));
  for (let l = 0; l < att.layers; l++) {
    box.appendChild(el("div", "ov-rowhead", t("layer {n}", { n: l + 1 })));
    for (let h = 0; h < att.heads; h++) {
      const m = thumbs[l][h];  // max-pooled to at most 48 × 48
      const btn = el("button", "ov-cell");
      btn.type = "button";
      btn.dataset.layer = l;
      btn.dataset.head = h;
      btn.setAttribute("aria-label", t("open layer {layer}, head {head}", { layer: l + 1, head: h + 1 }));
      if (l === state.layer && String(h) === String(state.head)) btn.classList.add("selected");
      const cv = document.createElement("canvas");
      const nq = m.length, nk = m[0] ? m[0].length : 0;
      const px = Math.max(2, Math.floor(96 / Math.max(nq, nk, 1)));
      cv.width = nk * px; cv.height = nq * px;
      const ctx = cv.getContext("2d");
      m.forEach((r, i) => r.forEach((w, j) => { ctx.fillStyle = color(w); ctx.fillRect(j * px, i * px, px, px); }));
      btn.appendChild(cv);
      btn.addEventListener("click", () => {
        state.layer = l; state.head = h;
        $("#layer").value = l; $("#head").value = h;
        refreshView();
      });
      box.appendChild(btn);
    }
  }
}

// ----------------------------------------------------------------------------------------- result

function fillSelect(sel, items, value) {
  sel.replaceChildren();
  for (const [v, label] of items) {
    const o = el("option", "", label);
    o.value = v;
    sel.appendChild(o);
  }
  if (value !== undefined && items.some(([v]) => String(v) === String(value))) sel.value = value;
}

// The one alignment verdict (evaluation/alignment.py: the notes' table of §1 on `i'm home .`), in the
// page's language: the same words `attnlab explain`, `doctor`, `attention` and the demo print.
function verdictText(a) {
  if (!a) return "";
  if (a.formed === null || a.formed === undefined) {
    return a.missing ? t("can't judge: the translation has no {missing} (the notes' table of §1: {table})", a) : "";
  }
  if (a.formed) return t("attention has formed: {agree} of {judged} words look where the notes' table of §1 says ({table})", a);
  const line = t("attention has not formed: {agree} of {judged} words look where the notes' table of §1 says ({table}); {wrong}", a);
  return a.missing ? line + "; " + t("the translation has no {missing}", a) : line;
}

function showResult(res, keepStep) {
  state.result = res;
  $("#result").hidden = false;
  $("#source-echo").textContent = res.source;
  const pair = pairOf(runInfo(res.run));
  $("#src-tag").textContent = langTag(pair.src);
  $("#tgt-tag").textContent = langTag(pair.tgt);
  const kinds = [...(res.kinds || Object.keys(res.attention))];
  kinds.sort((a, b) => KIND_ORDER.indexOf(a) - KIND_ORDER.indexOf(b));
  if (!kinds.includes(state.kind)) state.kind = kinds[0] || null;
  fillSelect($("#kind"), kinds.map((k) => [k, kindName(k)]), state.kind);
  const meta = [`${res.run} · ${res.model_kind}`, t("beam {n}", { n: res.beam_size }), `${res.elapsed_ms} ms`];
  if (res.unknown_words.length) meta.push(t("unknown to the model: {words}", { words: res.unknown_words.join(", ") }));
  if (res.truncated) meta.push(t("input truncated to the model's longest source"));
  if (res.alignment) meta.push(verdictText(res.alignment));
  for (const w of res.warnings || []) meta.push(w);
  $("#result-meta").textContent = meta.join("  ·  ");
  if (!keepStep) {
    state.step = 0;
    $("#step").value = 0;
    stopPlaying();
  }
  setupKind();
}

// Ask the server for another kind, layer or head of the sentence shown (it keeps the translation,
// so this does not run the model again).
async function refreshView() {
  if (!state.query) return;
  const id = ++state.requestId;
  state.step = Number($("#step").value);
  try {
    const res = await api("/api/translate", viewBody(state.query, state.kind, state.layer, state.head, true, PAD_SHOWN));
    if (id !== state.requestId) return;
    showResult(res, true);
  } catch (e) {
    if (id === state.requestId) setStatus(e.message, "error");
  }
}

function setupKind() {
  const res = state.result;
  const att = state.kind ? res.attention[state.kind] : null;
  const has = !!att;
  for (const id of ["#kind", "#layer", "#head", "#step", "#step-prev", "#step-next", "#step-play"]) $(id).disabled = !has;
  if (!has) {
    $("#kind-note").textContent = t("This model has no attention: the decoder sees one fixed context vector (notes §1–2). Try a Bahdanau or Transformer run.");
    $("#heatmap").replaceChildren();
    $("#alignment").replaceChildren();
    $("#overview").replaceChildren();
    $("#translation").textContent = res.translation;
    return;
  }
  if (att.layer !== null && att.layer !== undefined) state.layer = att.layer;  // the server's, counted from 0
  state.layer = state.layer < 0 ? att.layers - 1 : Math.min(state.layer, att.layers - 1);
  if (att.head !== null && att.head !== undefined) state.head = att.head;
  fillSelect($("#layer"), [...Array(att.layers).keys()].map((l) => [l, ofN(l, att.layers)]), state.layer);
  const heads = [...Array(att.heads).keys()].map((h) => [h, ofN(h, att.heads)]);
  if (att.heads > 1) heads.unshift(["mean", t("mean of heads")]);
  if (att.heads === 1) state.head = 0;
  else if (state.head !== "mean" && state.head >= att.heads) state.head = "mean";
  fillSelect($("#head"), heads, state.head);
  const names = pairNames(runInfo(res.run));
  const note = KIND_NOTES[state.kind] ? t(KIND_NOTES[state.kind], { pad: PAD_SHOWN, ...names }) : "";
  const tokens = tokenNote(runInfo(res.run));
  $("#kind-note").textContent = note + (tokens ? " " + tokens : "");
  const stepRows = decodingRows(att);
  // The encoder has no decoding steps (it reads the whole source at once, §12): no stepper.
  for (const id of ["#step", "#step-prev", "#step-next", "#step-play"]) $(id).disabled = !stepRows.length;
  $("#step").max = stepRows.length;
  $("#step").value = Math.min(state.step, stepRows.length);
  renderOverview(att);
  draw();
}

const ofN = (i, n) => t("{i} of {n}", { i: i + 1, n });  // a layer or head, counted from 1

// Rows that are decoding steps: every row for cross/dec_self; the target rows for decoder-only self.
function decodingRows(att) {
  if (state.kind === "enc_self") return [];
  if (state.kind === "self") return att.outputs.map((o, i) => (o ? i : -1)).filter((i) => i >= 0);
  return att.queries.map((_, i) => i);
}

function draw() {
  const res = state.result;
  const att = res.attention[state.kind];
  if (!att) return;
  const m = matrixOf(att);
  if (!m) {  // over the server's response limit: say so instead of drawing nothing
    $("#heatmap").replaceChildren(el("p", "note", att.omitted || t("no weights were sent for this map")));
    $("#alignment").replaceChildren();
    return;
  }
  $("#heatmap").dataset.view = `${state.kind}:${att.layer}:${att.head}`;
  const rows = rowLabels(att, res);
  const cols = labels(res, att.keys);
  const steps = decodingRows(att);
  const step = Number($("#step").value);
  const cur = step > 0 && steps.length ? steps[step - 1] : null;
  const [qs, outs] = [labels(res, att.queries), att.outputs ? labels(res, att.outputs) : null];
  renderHeatmap($("#heatmap"), m, rows, cols, {
    numbers: $("#numbers").checked, corner: state.kind === "cross" ? t("out ↓ src →") : "",
    describe: (i) => (outs && outs[i] && att.outputs[i] !== att.queries[i]
      ? t("query “{query}” produced “{output}”", { query: qs[i], output: outs[i] }) : ""),
  });
  if (cur !== null) {
    $("#heatmap").querySelectorAll(".hm-row").forEach((r) => {
      const i = Number(r.dataset.row);
      r.classList.toggle("current", i === cur);
      r.classList.toggle("future", steps.includes(i) && i > cur);
    });
  }
  renderAlignment($("#alignment"), m, rows, cols, cur);
  // The translation, built up to the current step when stepping.
  const out = $("#translation");
  out.replaceChildren();
  const toks = labels(res, res.tgt_tokens);
  const joins = res.tgt_continues || [];
  const upto = cur === null ? toks.length : steps.indexOf(cur) + 1;
  toks.forEach((tok, i) => {  // BPE pieces joined into words: no "▁", no space inside a word
    if (i > 0 && !joins[i]) out.appendChild(document.createTextNode(" "));
    const text = joins[i] ? tok.replace(/^·/, "") : tok;
    out.appendChild(el("span", "tok" + (i === upto - 1 && cur !== null ? " current" : "") + (i >= upto ? " hidden-tok" : ""), text));
  });
  if (cur === null) out.replaceChildren(document.createTextNode(res.translation || t("(empty)")));
  if (!steps.length) $("#step-text").textContent = t("the encoder reads every source token at once: no decoding steps");
  else $("#step-text").textContent = cur === null ? t("all {n} steps", { n: steps.length })
    : t("step {step} of {n}: “{token}”", { step, n: steps.length, token: toks[step - 1] || "" });
  $("#overview").querySelectorAll(".ov-cell").forEach((b) => b.classList.toggle(
    "selected", Number(b.dataset.layer) === state.layer && String(b.dataset.head) === String(state.head)));
}

function stopPlaying() {
  if (state.playing) clearInterval(state.playing);
  state.playing = null;
  $("#step-play").textContent = t("▶ play");
}

function togglePlay() {
  if (state.playing) return stopPlaying();
  const max = Number($("#step").max);
  if (!max) return;
  if (Number($("#step").value) >= max) $("#step").value = 0;
  $("#step-play").textContent = t("❚❚ pause");
  state.playing = setInterval(() => {
    const v = Number($("#step").value) + 1;
    if (v > max) return stopPlaying();
    $("#step").value = v;
    draw();
  }, 900);
}

// ----------------------------------------------------------------------------------------- actions

async function translate(ev) {
  if (ev) ev.preventDefault();
  const text = $("#sentence").value;
  if (!text.trim()) { setStatus(t("Type a sentence first."), "error"); return; }
  const id = ++state.requestId;
  $("#translate").disabled = true;
  setStatus(t("Translating…"), "busy");
  const query = { text, beam_size: Number($("#beam").value), run: $("#run").value };
  fitSelection(runInfo(query.run));
  try {
    const res = await api("/api/translate", viewBody(query, state.kind, state.layer, state.head, true, PAD_SHOWN));
    if (id !== state.requestId) return;
    state.query = query;
    setStatus("");
    showResult(res);
  } catch (e) {
    if (id === state.requestId) setStatus(e.message, "error");
  } finally {
    if (id === state.requestId) $("#translate").disabled = false;
  }
}

async function compareRuns() {
  const text = $("#sentence").value;
  const box = $("#compare-out");
  if (!text.trim()) { setStatus(t("Type a sentence first, then compare."), "error"); return; }
  box.replaceChildren();
  const src = pairOf(runInfo($("#run").value)).src;  // the sentence is in this language: runs that read it
  for (const r of state.runs.filter((x) => pairOf(x).src === src)) {
    const card = el("div", "cmp");
    card.dataset.run = r.name;
    card.appendChild(el("h3", "", `${r.name}`));
    card.appendChild(el("p", "cmp-kind", `${r.model_kind} · ${paramsText(r)}`));
    const body = el("div", "cmp-body", t("translating…"));
    card.appendChild(body);
    box.appendChild(card);
    const kind = ["cross", "self"].find((k) => (r.kinds || []).includes(k)) || null;
    const query = { text, beam_size: Number($("#beam").value), run: r.name };
    api("/api/translate", viewBody(query, kind, -1, "mean", false)).then((res) => {  // last layer, heads' mean
      body.replaceChildren(el("p", "cmp-translation", res.translation || t("(empty)")));
      const att = kind ? res.attention[kind] : null;
      if (!att) { body.appendChild(el("p", "note", t("no attention (fixed context)"))); return; }
      const m = matrixOf(att);
      if (!m) { body.appendChild(el("p", "note", att.omitted || t("no weights were sent for this map"))); return; }
      const rows = rowLabels(att, res);
      const hm = el("div", "heatmap small");
      hm.setAttribute("role", "grid");
      hm.setAttribute("aria-label", t("{run} cross-attention", { run: r.name }));
      body.appendChild(hm);
      renderHeatmap(hm, m, rows, labels(res, att.keys), { cell: 22 });
    }).catch((e) => { body.replaceChildren(el("p", "status error", e.message)); });
  }
}

// ----------------------------------------------------------------------------------- attribution

// Is attention an explanation? (notes §27.5, §28.5): POST /api/attribution, drawn as heatmaps side by side.
const rhoText = (v) => (v === null || v === undefined ? "—" : (v >= 0 ? "+" : "") + v.toFixed(2));

function attrPanel(box, title, m, rows, cols) {
  const fig = el("figure", "panel");
  fig.appendChild(el("figcaption", "", title));
  const hm = el("div", "heatmap");
  hm.setAttribute("role", "grid");
  hm.setAttribute("aria-label", title);
  fig.appendChild(hm);
  box.appendChild(fig);
  renderHeatmap(hm, m, rows, cols, { cell: 30, numbers: true });
}

function showAttribution(res) {
  const box = $("#attr-out");
  box.replaceChildren();
  const bits = [`${res.source} → ${res.translation || t("(empty)")}`];
  if (res.method === "rollout") {
    for (const m of res.maps) {
      const kind = kindName(m.kind);
      bits.push(t("{kind}: ρ(rollout, last layer) {rho}", { kind, rho: rhoText(m.mean_rho) }));
      const shown = labels(res, m.labels);
      attrPanel(box, t("{kind}: last layer, heads averaged", { kind }), m.attention, shown, shown);
      attrPanel(box, t("{kind}: rollout", { kind }), m.rollout, shown.map((x, i) => `${x} · ρ ${rhoText(m.rho[i])}`), shown);
    }
  } else {
    bits.push(res.method_name + (res.steps ? ", " + t("{n} steps", { n: res.steps }) : ""));
    for (const c of res.compare) {
      const top1 = `${Math.round(c.top1_agreement * res.rows.length)}/${res.rows.length}`;
      bits.push(t("{title}: ρ {rho}, top-1 {top1}", { title: c.title, rho: rhoText(c.mean_rho), top1 }));
      attrPanel(box, c.title, c.weights, labels(res, res.rows), labels(res, res.cols));
    }
    if (res.completeness_gap !== null && res.completeness_gap !== undefined) {
      // Integrated gradients: how far each row's sum is from f(x) − f(0); more steps close it.
      const gap = t("completeness gap ≤ {gap} %", { gap: (100 * res.completeness_gap).toFixed(2) });
      bits.push(gap + (res.completeness_gap > 0.01 ? " " + t("(raise the steps)") : ""));
    }
    const first = res.compare[0];
    const rows = labels(res, res.rows).map((x, i) => (first ? `${x} · ρ ${rhoText(first.rho[i])}` : x));
    attrPanel(box, t("{method}: share of |attribution|", { method: res.method_name }), res.shares, rows, labels(res, res.cols));
  }
  for (const w of res.warnings || []) bits.push(w);  // e.g. the output tokens attributed at these steps
  bits.push(`${res.elapsed_ms} ms`);
  $("#attr-summary").textContent = bits.join("  ·  ");
}

async function attribute() {
  const text = $("#sentence").value;
  if (!text.trim()) { setStatus(t("Type a sentence first, then attribute it."), "error"); return; }
  const body = { text, run: $("#run").value, method: $("#attr-method").value, steps: Number($("#attr-steps").value) };
  $("#attribute").disabled = true;
  $("#attr-summary").textContent = t("computing…");
  try {
    showAttribution(await api("/api/attribution", body));
  } catch (e) {
    $("#attr-out").replaceChildren();
    $("#attr-summary").textContent = e.message;
  } finally {
    $("#attribute").disabled = false;
  }
}

// ----------------------------------------------------------------------------- alignment quality

// Does the attention align words? (notes §25): GET /api/alignment, the numbers of `attnlab align` on the
// gold sentences, drawn as one layer × head table of AER per shift (lower is better; the best head outlined).
const pct = (x) => (x === null || x === undefined ? "—" : (100 * x).toFixed(1));
const SHIFT_NOTES = [
  N_("shift 0: read at the step that predicts the word"),
  N_("shift 1: read at the step where the word is the decoder's input (Chen et al. 2020)"),
];

function clearAlignment() {
  $("#align-out").replaceChildren();
  $("#align-summary").textContent = "";
}

function aerCell(score, best) {
  const td = el("td", "aer-cell", pct(score && score.aer));
  if (!score || score.aer === null) return td;
  td.style.background = color(1 - score.aer);  // darker = lower AER = better
  if (score.aer < 0.45) td.classList.add("dark");
  if (best) td.classList.add("best");
  td.title = t("AER {aer} % · precision {precision} % · recall {recall} %",
    { aer: pct(score.aer), precision: pct(score.precision), recall: pct(score.recall) });
  return td;
}

function aerTable(res, shift) {
  const byKey = new Map(res.scores.filter((s) => s.shift === shift).map((s) => [`${s.layer}:${s.head}`, s]));
  const b = res.best_head;
  const table = el("table", "aer-table");
  table.dataset.shift = shift;
  table.appendChild(el("caption", "", t(SHIFT_NOTES[shift])));
  const head = el("tr");
  head.appendChild(el("th", ""));
  for (let h = 0; h < res.heads; h++) head.appendChild(el("th", "", t("head {n}", { n: h + 1 })));
  if (res.heads > 1) head.appendChild(el("th", "", t("head average")));
  table.appendChild(head);
  for (let l = 0; l < res.layers; l++) {
    const tr = el("tr");
    tr.appendChild(el("th", "", t("layer {n}", { n: l + 1 })));
    for (let h = 0; h < res.heads; h++) {
      tr.appendChild(aerCell(byKey.get(`${l}:${h}`), b.shift === shift && b.layer === l && b.head === h));
    }
    if (res.heads > 1) tr.appendChild(aerCell(byKey.get(`${l}:null`), false));
    table.appendChild(tr);
  }
  return table;
}

function alignmentSummary(res) {
  const b = res.best_head;
  const bits = [
    t("{n} of {total} gold sentences", { n: res.sentences, total: res.sentences_total }),
    t("attention read: {kind}", { kind: kindName(res.attention) }),
    t("links: {method}", { method: res.links.method }),
    t("best head: layer {layer} head {head}, shift {shift}: AER {aer} % (precision {precision} %, recall {recall} %)",
      { layer: b.layer + 1, head: b.head + 1, shift: b.shift, aer: pct(b.aer), precision: pct(b.precision), recall: pct(b.recall) }),
  ];
  const all = res.scores.find((s) => s.layer === null && s.shift === b.shift);
  if (all) bits.push(t("all layers and heads averaged: AER {aer} %", { aer: pct(all.aer) }));
  if (res.top_k) bits.push(t("best {k} heads averaged: AER {aer} %", { k: res.top_k.members.length, aer: pct(res.top_k.aer) }));
  bits.push(t("gold words unknown to the model: English {en} %, French {fr} %",
    { en: pct(res.oov.en.unk), fr: pct(res.oov.fr.unk) }));
  bits.push(t("published on the whole test set: fast_align {fast} %, IBM Model 4 {ibm4} %",
    { fast: pct(res.published["fast_align en→fr"]), ibm4: pct(res.published["Mgiza (IBM-4) en→fr"]) }));
  bits.push(res.cached ? t("cached") : `${Math.round(1000 * res.seconds)} ms`);
  return bits.join("  ·  ");
}

function showAlignment(res) {
  const box = $("#align-out");
  box.replaceChildren(aerTable(res, 0), aerTable(res, 1));
  box.appendChild(el("p", "note", t("AER % per layer × head (lower is better; darker cells align better); the outlined cell is the best head, chosen on these same sentences.")));
  $("#align-summary").textContent = alignmentSummary(res);
}

async function scoreAlignment() {
  const q = new URLSearchParams({ run: $("#run").value, sentences: $("#align-sentences").value, links: $("#align-links").value });
  $("#align-score").disabled = true;
  $("#align-summary").textContent = t("force-decoding the gold sentences…");
  try {
    showAlignment(await api(`/api/alignment?${q}`));
  } catch (e) {
    $("#align-out").replaceChildren();
    $("#align-summary").textContent = e.message;
  } finally {
    $("#align-score").disabled = false;
  }
}

// -------------------------------------------------------------------------------------- timeline

async function loadProbes() {
  const run = $("#run").value;
  state.probes = null;
  stopProbe();
  try {
    const data = await api(`/api/probes?run=${encodeURIComponent(run)}`);
    if (run !== $("#run").value) return;
    state.probes = data;
  } catch (e) {
    state.probes = { sentences: [] };
  }
  const ss = state.probes.sentences;
  $("#timeline-card").classList.toggle("empty", !ss.length);
  const first = pairOf(runInfo(run)).examples[0];  // the record's first example (the notes' `i'm home .` for fra-eng)
  fillSelect($("#probe-sentence"), ss.map((s, i) => [i, s.sentence]), Math.max(0, ss.findIndex((s) => s.sentence === first)));
  for (const id of ["#probe-sentence", "#probe-layer", "#probe-step", "#probe-play"]) $(id).disabled = !ss.length;
  if (!ss.length) {
    $("#probe-translation").textContent = t("This run has no probe recordings (probes.jsonl): they are written at each validation while training.");
    $("#probe-heatmap").replaceChildren();
    $("#probe-step-label").textContent = "";
    return;
  }
  setupProbe(true);
}

function probeKind(rec) {
  for (const k of ["cross", "self"]) if (rec.attention[k]) return k;
  return Object.keys(rec.attention)[0];
}

function setupProbe(toEnd) {
  const s = state.probes.sentences[Number($("#probe-sentence").value) || 0];
  const last = s.steps[s.steps.length - 1];
  const kind = probeKind(last);
  const layers = kind ? last.attention[kind].length : 0;
  fillSelect($("#probe-layer"), [...Array(layers).keys()].map((l) => [l, ofN(l, layers)]), layers - 1);
  $("#probe-step").max = s.steps.length - 1;
  if (toEnd) $("#probe-step").value = s.steps.length - 1;
  drawProbe();
}

function drawProbe() {
  const s = state.probes.sentences[Number($("#probe-sentence").value) || 0];
  const rec = s.steps[Math.min(Number($("#probe-step").value), s.steps.length - 1)];
  const kind = probeKind(rec);
  $("#probe-step-label").textContent = t("step {step}  ({i} of {n})", {
    step: rec.step.toLocaleString(), i: Number($("#probe-step").value) + 1, n: s.steps.length,
  }) + (rec.alignment ? "  ·  " + verdictText(rec.alignment) : "");
  const tgt = langTag(pairOf(runInfo($("#run").value)).tgt);
  $("#probe-translation").replaceChildren(el("span", "lang", tgt), document.createTextNode(" " + (rec.translation || t("(empty)"))));
  if (!kind) { $("#probe-heatmap").replaceChildren(); return; }
  const A = rec.attention[kind];
  const m = A[Math.min(Number($("#probe-layer").value), A.length - 1)];
  let keys = labels(state.probes, rec.src_tokens);  // the server's token_labels, as for a translation
  if (kind === "self") keys = keys.concat(["<bos>"], labels(state.probes, rec.tgt_tokens).slice(0, -1));  // keys: source <bos> y1 …
  const nk = m.length ? m[0].length : 0;
  keys = keys.slice(0, nk);
  while (keys.length < nk) keys.push("·");
  const rows = labels(state.probes, rec.tgt_tokens).slice(0, m.length);
  while (rows.length < m.length) rows.push("·");
  renderHeatmap($("#probe-heatmap"), m, rows, keys, { cell: 34, corner: t("mean of heads") });
}

function stopProbe() {
  if (state.probePlaying) clearInterval(state.probePlaying);
  state.probePlaying = null;
  $("#probe-play").textContent = t("▶ play");
}

function toggleProbe() {
  if (state.probePlaying) return stopProbe();
  const sl = $("#probe-step");
  if (Number(sl.value) >= Number(sl.max)) sl.value = 0;
  $("#probe-play").textContent = t("❚❚ pause");
  state.probePlaying = setInterval(() => {
    if (Number(sl.value) >= Number(sl.max)) return stopProbe();
    sl.value = Number(sl.value) + 1;
    drawProbe();
  }, 500);
}

// ------------------------------------------------------------------------------------------- start

const paramsText = (r) => t("{n} parameters", { n: r.parameters.toLocaleString() });

function showRunFacts() {
  const r = state.runs.find((x) => x.name === $("#run").value);
  if (!r) return;
  const bits = [`${r.model_kind}`, paramsText(r)];
  if (r.kinds.length > 1 || r.num_heads > 1) bits.push(t("{layers} layers × {heads} heads", { layers: r.num_layers, heads: r.num_heads }));
  bits.push(t("{dataset} · {tokenizer} tokens · checkpoint {checkpoint}", { dataset: r.dataset, tokenizer: r.tokenizer, checkpoint: r.checkpoint || "?" }));
  // The server sends `test` only when eval-test.json scored this very checkpoint (same weights).
  if (r.test && typeof r.test.bleu === "number") bits.push(t("test BLEU {bleu}", { bleu: r.test.bleu.toFixed(1) }));
  else if (r.test_other) {
    bits.push(r.test_other.checkpoint ? t("test BLEU not shown: it scored {checkpoint}", { checkpoint: r.test_other.checkpoint })
      : t("test BLEU not shown: it does not say which checkpoint it scored"));
  }
  $("#run-facts").textContent = bits.join("  ·  ");
  $("#run-facts").title = r.test_other ? r.test_other.reason : "";
  showPair(r);
}

// The selected run's pair: the title, the input's placeholder, the example buttons (its record's sentences
// and probes, never another pair's), and the alignment card only where the English–French gold fits it.
function showPair(r) {
  const pair = pairOf(r), names = pairNames(r);
  $("#pair-title").textContent = `${names.src} → ${names.tgt}`;  // each name in the page's language
  const examples = (pair.examples || []).slice(0, 8);  // the server keeps those the run reads without <unk>
  $("#sentence").placeholder = examples.length
    ? t("Type a {src} sentence, e.g. {example}", { src: names.src, example: examples[0] })
    : t("Type a {src} sentence", { src: names.src });
  $("#sentence").setAttribute("aria-label", t("{src} sentence", { src: names.src }));
  const chips = $("#examples");
  chips.replaceChildren();
  for (const s of examples) {
    const b = el("button", "chip", s);
    b.type = "button";
    b.addEventListener("click", () => { $("#sentence").value = s; translate(); });
    chips.appendChild(b);
  }
  $("#align-card").hidden = !pair.gold;
  if (state.result && state.result.run !== r.name) $("#result").hidden = true;  // its tags named another pair
}

// What "§N" means (GET /api/sections): the notes' sections with D2L's numbers in both editions, each topic in
// the page's language. A failure leaves the table empty; the rest of the page does not depend on it.
async function loadSections() {
  let data;
  try { data = await api("/api/sections"); } catch (e) { return; }
  const zh = (document.documentElement.lang || "").startsWith("zh");
  const body = $("#sections-table tbody");
  body.replaceChildren(...data.sections.map((s) => {
    const tr = el("tr");
    for (const v of ["§" + s.number, zh ? s.title_zh : s.title, s.d2l_zh, s.d2l_en]) tr.append(el("td", null, v));
    return tr;
  }));
}

async function start() {
  await loadMessages();
  translatePage();
  loadSections();
  let info;
  try {
    info = await api("/api/runs");
  } catch (e) {
    setStatus(t("Cannot reach the server: {error}", { error: e.message }), "error");
    return;
  }
  state.runs = info.runs;
  state.limits = info.limits;
  fillSelect($("#run"), info.runs.map((r) => [r.name, `${r.name} (${r.model_kind})`]), info.default);
  $("#sentence").maxLength = info.limits.max_chars;
  [...$("#beam").options].forEach((o) => { o.disabled = Number(o.value) > info.limits.max_beam; });
  $("#compare-card").hidden = info.runs.length < 2;
  showRunFacts();
  loadProbes();
}

document.addEventListener("DOMContentLoaded", () => {
  $("#form").addEventListener("submit", translate);
  $("#run").addEventListener("change", () => {
    state.layer = -1;  // a new run opens on its last layer
    showRunFacts();
    clearAlignment();
    loadProbes();
    if (state.result && $("#sentence").value.trim()) translate();
  });
  $("#beam").addEventListener("change", () => { if (state.result) translate(); });
  $("#kind").addEventListener("change", () => { state.kind = $("#kind").value; state.step = 0; $("#step").value = 0; stopPlaying(); refreshView(); });
  $("#layer").addEventListener("change", () => { state.layer = Number($("#layer").value); refreshView(); });
  $("#head").addEventListener("change", () => {
    const v = $("#head").value;
    state.head = v === "mean" ? "mean" : Number(v);
    refreshView();
  });
  $("#numbers").addEventListener("change", draw);
  $("#step").addEventListener("input", () => { stopPlaying(); draw(); });
  $("#step-prev").addEventListener("click", () => { stopPlaying(); $("#step").value = Math.max(0, Number($("#step").value) - 1); draw(); });
  $("#step-next").addEventListener("click", () => { stopPlaying(); $("#step").value = Math.min(Number($("#step").max), Number($("#step").value) + 1); draw(); });
  $("#step-play").addEventListener("click", togglePlay);
  $("#compare").addEventListener("click", compareRuns);
  $("#attribute").addEventListener("click", attribute);
  $("#align-score").addEventListener("click", scoreAlignment);
  $("#attr-method").addEventListener("change", () => { $("#attr-steps").disabled = $("#attr-method").value !== "ig"; });
  $("#probe-sentence").addEventListener("change", () => { stopProbe(); setupProbe(true); });
  $("#probe-layer").addEventListener("change", drawProbe);
  $("#probe-step").addEventListener("input", () => { stopProbe(); drawProbe(); });
  $("#probe-play").addEventListener("click", toggleProbe);
  window.addEventListener("scroll", hideTip, { passive: true });
  start();
});
