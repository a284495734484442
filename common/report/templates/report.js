// The report's only script: inlined into index.html by report.html.j2. It reads the JSON block
// #report-data, draws the question list, and builds a question's detail only when it is opened.
"use strict";
const D = JSON.parse(document.getElementById("report-data").textContent);
const Q = D.questions;
const COLORS = D.page.colors;
const BY_QID = new Map(Q.map(q => [q.qid, q]));

function esc(s) {
  return String(s === null || s === undefined ? "" : s).replace(/[&<>"']/g,
    c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"})[c]);
}
function labelText(q) {
  if (!q.scored) return '<span class="muted">not scored</span>';
  if (q.label === 1) return '<span class="lab-1">correct</span>';
  if (q.label === 0) return '<span class="lab-0">wrong</span>';
  return '<span class="lab-failed">failed</span>';
}
function clsText(c) {
  return c ? `<span class="cls" style="background:${COLORS[c] || "#777"}">${esc(c)}</span>` : "";
}
function num(x, digits) { return x === null || x === undefined ? "" : Number(x).toFixed(digits); }
function link(where) {
  if (!where) return '<span class="muted">no row</span>';
  const file = where.split(":")[0];
  // The report lives in <run>/report/; the artifacts one level up.
  return `<a href="../${esc(file)}" title="open the file; the row is on this line"><code>${esc(where)}</code></a>`;
}

// ------------------------------------------------------------------ filters and list
function fillSelect(id, values) {
  const sel = document.getElementById(id);
  for (const v of values) {
    const o = document.createElement("option");
    o.value = v; o.textContent = v; sel.appendChild(o);
  }
}
fillSelect("f-cat", [...new Set(Q.map(q => q.cat))]);
fillSelect("f-cause", [...new Set(Q.map(q => q.cause).filter(Boolean))].sort());
fillSelect("f-cls", D.page.classes.filter(c => Q.some(q => q.cls === c)));

const state = {cat: "", label: "", cause: "", cls: "", text: "", sort: "", dir: "desc"};
let shown = [];  // the qids of the list as filtered and sorted, for j/k stepping

function matches(q) {
  if (state.cat && q.cat !== state.cat) return false;
  if (state.label) {
    if (state.label === "disagree") { if (!q.disagree) return false; }
    else if (state.label === "unscored") { if (q.scored) return false; }
    else if (!q.scored) return false;
    else if (state.label === "failed") { if (q.label !== null) return false; }
    else if (String(q.label) !== state.label) return false;
  }
  if (state.cause && q.cause !== state.cause) return false;
  if (state.cls && q.cls !== state.cls) return false;
  if (state.text) {
    const hay = `${q.qid}\n${q.q}\n${q.answer || ""}\n${q.gold || ""}`.toLowerCase();
    if (!hay.includes(state.text)) return false;
  }
  return true;
}

function renderList() {
  let rows = Q.filter(matches);
  if (state.sort) {
    const k = state.sort, sign = state.dir === "asc" ? 1 : -1;
    // Missing values sort last in both directions.
    rows = rows.slice().sort((a, b) => {
      const x = a[k], y = b[k];
      if (x === null || x === undefined) return (y === null || y === undefined) ? 0 : 1;
      if (y === null || y === undefined) return -1;
      return sign * (x - y);
    });
  }
  const html = rows.map(q =>
    `<div class="qrow" role="row" data-qid="${esc(q.qid)}" data-cat="${esc(q.cat)}"><span class="c-qid"><code>${esc(q.qid)}</code></span>` +
    `<span class="c-cat">${esc(q.cat)}</span><span class="c-q" title="${esc(q.q)}">${esc(q.q)}</span>` +
    `<span class="c-ans" title="${esc(q.answer)}">${esc(q.answer)}</span>` +
    `<span class="c-lab">${labelText(q)}${q.disagree ? ' <span title="the judges disagree">&#9888;</span>' : ""}</span>` +
    `<span class="c-cls">${clsText(q.cls)}</span><span class="c-num tokens">${q.tokens ?? ""}</span>` +
    `<span class="c-num seconds">${num(q.seconds, 3)}</span><span class="c-num f1">${num(q.f1, 3)}</span></div>`).join("");
  shown = rows.map(q => q.qid);
  document.getElementById("question-body").innerHTML = html;
  document.getElementById("shown-count").textContent = rows.length;
  const open = location.hash.startsWith("#q=") ? decodeURIComponent(location.hash.slice(3)) : "";
  if (open) markOpen(open);
}

for (const [id, key] of [["f-cat", "cat"], ["f-label", "label"], ["f-cause", "cause"], ["f-cls", "cls"],
                         ["f-sort", "sort"], ["f-dir", "dir"]]) {
  document.getElementById(id).addEventListener("change", e => { state[key] = e.target.value; renderList(); });
}
let typing = null;
document.getElementById("f-text").addEventListener("input", e => {
  clearTimeout(typing);
  typing = setTimeout(() => { state.text = e.target.value.trim().toLowerCase(); renderList(); }, 120);
});
for (const th of document.querySelectorAll(".qhead .sortable")) {
  th.addEventListener("click", () => {
    const k = th.dataset.sort;
    state.dir = state.sort === k && state.dir === "desc" ? "asc" : "desc";
    state.sort = k;
    document.getElementById("f-sort").value = k;
    document.getElementById("f-dir").value = state.dir;
    renderList();
  });
}
document.getElementById("question-body").addEventListener("click", e => {
  const row = e.target.closest(".qrow[data-qid]");
  if (row) openQuestion(row.dataset.qid);
});

// ------------------------------------------------------------------ the detail, built on demand
function kv(obj, keys) {
  return '<table class="kv">' + keys.filter(k => obj[k] !== undefined && obj[k] !== null && obj[k] !== "")
    .map(k => `<tr><td>${esc(k)}</td><td>${esc(typeof obj[k] === "object" ? JSON.stringify(obj[k]) : obj[k])}</td></tr>`)
    .join("") + "</table>";
}
function anchorText(a) {
  if (!a) return "";
  const parts = [`[${a.entity || "?"}]`, a.entity_type ? `[${a.entity_type}]` : "", `[${a.property || "?"}:${a.value || ""}]`];
  if (a.condition_property) parts.push(` if ${a.condition_property}=${a.condition_value || ""}`);
  return parts.join("");
}

function planSection(d) {
  const p = d.plan;
  if (!p) {
    const why = d.retrieval ? "no plan: this method does not plan (a baseline); its evidence is below"
                            : "no plan file row (an imported run, or 05_plan has not run)";
    return `<section id="d-plan"><h4>Plan</h4><p class="muted">${why}</p></section>`;
  }
  const target = p.answer_target || {};
  const resolved = (d.retrieval && d.retrieval.resolved_anchors) || {};
  const bridges = (d.retrieval && d.retrieval.bridges) || [];
  const hops = (p.hops || []).map(h => {
    const b = bridges.filter(x => x.hop_id === h.hop_id);
    return `<tr data-hop="${esc(h.hop_id)}"><td>${esc(h.hop_id)}</td><td>${esc(h.purpose || "")}</td>` +
      `<td><code>${esc(anchorText(h.anchor))}</code>` +
      (resolved[h.hop_id] ? `<br>resolved: <code>${esc(anchorText(resolved[h.hop_id]))}</code>` : "") + `</td>` +
      `<td>${esc((h.depends_on || []).join(", "))}</td><td>${esc(h.bridge_request || "")}` +
      b.map(x => `<br>bridge value: <b class="bridge-value">${esc(x.value)}</b>` +
        (x.error ? ` <span class="warn">${esc(x.error)}</span>` : "") +
        ` <span class="muted">(from ${esc((x.supporting_episode_ids || []).join(", "))})</span>`).join("") + `</td></tr>`;
  }).join("");
  const props = (p.required_properties || []).map(r =>
    `<li><code>[${esc(r.entity)}][${esc(r.entity_type)}][${esc(r.property_text || r.broad_property)}:${esc(r.value)}]</code> ${esc(r.role || "")}</li>`).join("");
  return `<section id="d-plan"><h4>Plan</h4>` +
    `<table class="kv"><tr><td>answer target</td><td id="plan-target">${esc(target.type || "")}: ${esc(target.description || "")}</td></tr>` +
    `<tr><td>reasoning type</td><td id="plan-reasoning">${esc(p.reasoning_type)}</td></tr>` +
    `<tr><td>scope</td><td id="plan-scope">${esc(p.retrieval_scope)}</td></tr></table>` +
    (props ? `<p>required properties:</p><ul>${props}</ul>` : "") +
    `<table id="plan-hops"><thead><tr><th>hop</th><th>purpose</th><th>anchor</th><th>depends on</th><th>bridge</th></tr></thead><tbody>${hops}</tbody></table>` +
    (d.plan_meta && (d.plan_meta.repaired || d.plan_meta.fallback_used || d.plan_meta.error)
      ? `<p class="warn">plan: ${esc(JSON.stringify(d.plan_meta))}</p>` : "") + `</section>`;
}

function retrievalSection(d) {
  const r = d.retrieval;
  if (!r) return `<section id="d-retrieval"><h4>Retrieval</h4><p class="muted">no retrieval row (an imported run: answers and labels only)</p></section>`;
  const byHop = new Map();
  // Hops in the plan's order, then any hop the plan does not name.
  for (const h of (d.plan && d.plan.hops) || []) byHop.set(h.hop_id, []);
  for (const s of r.selected) { if (!byHop.has(s.hop_id)) byHop.set(s.hop_id, []); byHop.get(s.hop_id).push(s); }
  let body = "";
  for (const [hop, sel] of byHop) {
    const covered = r.coverage[hop];
    if (!sel.length) { body += `<h5>hop ${esc(hop)}</h5><p class="muted">no episode selected for this hop</p>`; continue; }
    const row = s => `<tr><td><code>${esc(s.episode_id)}</code></td><td>${esc(s.route)}</td><td>${num(s.score, 4)}</td><td>` +
      (s.record ? `<code>[${esc(s.record.entity)}][${esc(s.record.entity_type)}][${esc(s.record.property)}:${esc(s.record.value)}]</code>` +
        (s.record.condition_property ? ` if ${esc(s.record.condition_property)}=${esc(s.record.condition_value)}` : "") +
        ` <span class="muted">turns ${esc((s.record.evidence_dia_ids || []).join(", "))}; ${link(s.record._where)}</span>`
        : (s.record_id ? `<code>${esc(s.record_id)}</code> (not in 03_extract)` : '<span class="muted">none</span>')) +
      `</td></tr>`;
    const table = list => `<table class="hop" data-hop="${esc(hop)}"><thead><tr><th>episode</th><th>route</th><th>score</th>` +
      `<th>matched record</th></tr></thead><tbody>${list.map(row).join("")}</tbody></table>`;
    // Broad scopes select dozens of episodes: the first ten in view, the rest one click away.
    body += `<h5>hop ${esc(hop)} ${covered === undefined ? "" : covered ? "(covered by a structured match)" : "(not covered: fallback routes)"}</h5>` +
      table(sel.slice(0, 10)) +
      (sel.length > 10 ? `<details><summary>${sel.length - 10} more episodes of this hop</summary>${table(sel.slice(10))}</details>` : "");
  }
  if (!d.plan && !r.selected.length) {
    body = `<p class="muted">no selected episodes (a baseline: its own evidence)` +
      (Object.keys(r.method_info || {}).length ? `: <code>${esc(JSON.stringify(r.method_info).slice(0, 400))}</code>` : "") + `</p>`;
  }
  return `<section id="d-retrieval"><h4>Retrieval</h4>` +
    `<p>mode ${esc(r.mode)}, ${r.episode_ids.length} episodes, ${r.dia_ids.length} turns, ` +
    `${esc(r.tokens)} buffer tokens, ${num(r.seconds, 3)} s${r.error ? `, <span class="warn">${esc(r.error)}</span>` : ""}</p>` +
    body + `</section>`;
}

function bufferSection(d) {
  const r = d.retrieval;
  const loss = d.loss;
  const gold = new Set(loss && loss.coverage.source !== "answer_sessions" ? loss.coverage.gold_ids : (d.gold.evidence || []));
  let cov = "";
  if (loss) {
    const missing = loss.coverage.gold_ids.filter(i => !(r ? r.dia_ids : []).includes(i));
    cov = `<p id="coverage-line">gold evidence (${esc(loss.coverage.source)}): ${loss.coverage.found} of ${loss.coverage.needed} in the buffer` +
      (loss.coverage.source !== "answer_sessions" && missing.length ? `; missing: <code>${esc(missing.join(", "))}</code>` : "") + `</p>`;
  }
  if (!r) return `<section id="d-buffer"><h4>Evidence buffer</h4>${cov}<p class="muted">no buffer in this run</p></section>`;
  const text = r.buffer.map(i => D.blocks[i]).join("\n\n");
  let current = null;
  const lines = text.split("\n").map(line => {
    const m = /^\[([^\]]+)\] /.exec(line);
    if (m) current = m[1];
    else if (!line.startsWith("    ")) current = null;  // indented lines (image captions) belong to the turn above
    const hit = current !== null && gold.has(current);
    return hit ? `<span class="gold" data-dia="${esc(current)}">${esc(line)}</span>` : esc(line);
  });
  return `<section id="d-buffer"><h4>Evidence buffer (as the answer model saw it; gold evidence turns highlighted)</h4>${cov}` +
    `<pre class="buffer" id="buffer-text">${lines.join("\n") || '<span class="muted">(empty buffer)</span>'}</pre></section>`;
}

function rubricTable(items, caption) {
  const rows = items.map(i => `<tr class="rubric-item"><td>${esc(i.item)}</td><td>${esc(String(i.score))}</td>` +
    `<td>${num(i.int, 0)}</td><td>${num(i.float, 1)}</td><td class="rubric-reason">${esc(i.reason || "")}</td></tr>`).join("");
  return `<table class="rubric"><caption>${esc(caption)}</caption><tr><th>rubric item</th><th>judge score</th>` +
    `<th>official int()</th><th>float</th><th>reason</th></tr>${rows}</table>`;
}

function rubricSection(rb) {
  if (!rb) return "";
  const v = Object.entries(rb.variants).map(([k, x]) => `${esc(k)} ${num(x, 3)}${k === rb.headline ? " (headline)" : ""}`);
  const o = rb.ordering;
  const tau = o ? `<p class="rubric-tau">event ordering: tau_norm ${o.tau_undefined ? "undefined (scored 0)" : num(o.tau_norm, 3)}; ` +
    `precision ${num(o.precision, 3)}, recall ${num(o.recall, 3)}, F1 ${num(o.f1, 3)}</p>` : "";
  return `<p class="rubric-scores">question scores: ${v.join("; ") || "none"}</p>` + tau +
    (rb.items ? rubricTable(rb.items, "<question> unfilled (official)") : "") +
    (rb.filled_items ? rubricTable(rb.filled_items, "<question> filled (corrected)") : "");
}

function openQuestion(qid) {
  const q = BY_QID.get(qid), d = D.details[qid];
  if (!q || !d) return;
  const g = d.gold;
  const judges = Object.entries(d.judges).map(([j, r]) => r === null
    ? `<div class="judge" data-judge="${esc(j)}"><b>${esc(j)}</b>: <span class="muted">no judge row${q.scored ? " (missing_judgment)" : " (not scored)"}</span></div>`
    : `<div class="judge" data-judge="${esc(j)}"><b>${esc(j)}</b> (${esc(r.judge_model)}, prompt ${esc(r.prompt_id)}): label ` +
      `<b class="judge-label">${r.label === null ? "failed" : r.label}</b>${r.error ? ` <span class="warn">${esc(r.error)}</span>` : ""}` +
      rubricSection(r.rubric) + `<pre class="raw judge-raw">${esc(r.raw)}</pre>${link(r.where)}</div>`).join("");
  const read = new Set(d.retrieval ? d.retrieval.dia_ids : []);
  const goldTurns = (g.turns || []).map(t => {
    const m = /^\[([^\]]+)\]/.exec(t);
    const inBuffer = m && read.has(m[1]);
    return `<li class="${inBuffer ? "in-buffer" : "missing"}" data-dia="${esc(m ? m[1] : "")}"><code>${esc(t)}</code> ` +
      `<span class="${inBuffer ? "lab-1" : "lab-0"}">${inBuffer ? "in the buffer" : "not in the buffer"}</span></li>`;
  }).join("");
  const links = Object.entries(d.where).map(([k, w]) => `<li>${esc(k)}: ${link(w)}</li>`).join("");
  document.getElementById("detail").innerHTML =
    `<h3 id="detail-qid">${esc(qid)}</h3>` +
    `<section id="d-question"><h4>Question</h4><p id="detail-question">${esc(d.question.text)}</p>` +
    `<p class="muted">${esc(q.cat)}; memory ${esc(d.question.memory)}${d.question.date ? "; asked " + esc(d.question.date) : ""}</p></section>` +
    planSection(d) + retrievalSection(d) + bufferSection(d) +
    `<section id="d-answer"><h4>Answer</h4>` + (d.answer
      ? `<p id="detail-answer">${esc(d.answer.text === null ? "(no answer)" : d.answer.text)}</p>` +
        (d.answer.error ? `<p class="warn">${esc(d.answer.error)}</p>` : "")
      : `<p class="muted">no answer row</p>`) + `</section>` +
    `<section id="d-gold"><h4>Gold</h4><p id="detail-gold">${esc(g.answer || g.adversarial_answer)}</p>` +
    `<p class="muted">evidence: <code>${esc((g.evidence.length ? g.evidence : g.has_answer).join(", ") || "none")}</code>` +
    (g.answer_session_ids.length ? `; answer sessions <code>${esc(g.answer_session_ids.join(", "))}</code>` : "") + `</p>` +
    (goldTurns ? `<ul class="gold-turns">${goldTurns}</ul>` : "") + `</section>` +
    `<section id="d-judges"><h4>Judges</h4>${judges || '<p class="muted">no judge files</p>'}</section>` +
    `<section id="d-score"><h4>Scores</h4><p>official F1: <span id="detail-f1">${q.f1 === null ? "n/a" : num(q.f1, 4)}</span>; ` +
    `loss class: ${clsText(q.cls) || '<span class="muted">none</span>'}</p></section>` +
    bSection(qid) + `<section id="d-links"><h4>Rows</h4><ul>${links}</ul></section>`;
  history.replaceState(null, "", "#q=" + encodeURIComponent(qid));
  markOpen(qid);
}
function markOpen(qid) {
  for (const row of document.querySelectorAll("#question-body > .open")) row.classList.remove("open");
  const row = document.querySelector(`#question-body > [data-qid="${CSS.escape(qid)}"]`);
  if (row) row.classList.add("open");
}

// ------------------------------------------------------------------ the diff view
function diffRows(list, cls) {
  return list.map(f => {
    const q = BY_QID.get(f.qid) || {q: "", answer: "", cls: "", cat: ""};
    return `<tr class="${cls} ${f.direction === "right->wrong" ? "flip-rw" : f.direction === "wrong->right" ? "flip-wr" : ""}" ` +
      `data-qid="${esc(f.qid)}" data-direction="${esc(f.direction)}">` +
      `<td>${esc(f.direction)}</td><td><code>${esc(f.qid)}</code></td><td>${esc(q.cat)}</td><td>${esc(q.q)}</td>` +
      `<td>${esc(q.answer)}</td><td>${clsText(q.cls)}</td><td>${esc(f.answer_b)}</td><td>${clsText(f.cls_b)}</td></tr>`;
  }).join("");
}
function renderDiff() {
  const body = document.getElementById("diff-body");
  if (!body || !D.diff) return;
  body.innerHTML = diffRows(D.diff.flipped, "flip-row") || '<tr><td colspan="8" class="muted">no question flipped</td></tr>';
  const rest = document.getElementById("diff-unchanged");
  // The unchanged questions are drawn only when their list is opened.
  rest.addEventListener("toggle", () => {
    const tb = document.getElementById("diff-unchanged-body");
    if (rest.open && !tb.children.length) tb.innerHTML = diffRows(D.diff.unchanged_rows, "same-row");
  });
  for (const el of [body, document.getElementById("diff-unchanged-body")]) {
    el.addEventListener("click", e => {
      const tr = e.target.closest("tr[data-qid]");
      if (tr) { openQuestion(tr.dataset.qid); document.getElementById("detail").scrollIntoView(); }
    });
  }
}
function bSection(qid) {
  const b = D.diff && D.diff.b[qid];
  if (!D.diff) return "";
  if (!b) return `<section id="d-b"><h4>Run B</h4><p class="muted">not in run B</p></section>`;
  const lab = b.label === null ? "failed" : b.label;
  return `<section id="d-b"><h4>Run B (<code>${esc(D.diff.run_b)}</code>)</h4>` +
    `<p>answer: <span id="detail-b-answer">${esc(b.answer === null ? "(no answer)" : b.answer)}</span></p>` +
    `<p>label <b id="detail-b-label">${esc(lab)}</b>, loss class ${clsText(b.cls) || "none"}, ${esc(b.tokens ?? "?")} buffer tokens` +
    (b.error ? `, <span class="warn">${esc(b.error)}</span>` : "") + `</p>` +
    (b.raw !== null && b.raw !== undefined ? `<pre class="raw">${esc(b.raw)}</pre>` : "") +
    `<p>${link(b.where_answer)} ${link(b.where_judge)} <span class="muted">(files of run B)</span></p></section>`;
}

// j / k step to the next / previous question of the filtered list (not while typing in a field).
document.addEventListener("keydown", e => {
  if (e.target.closest("input, select, textarea") || e.ctrlKey || e.metaKey || e.altKey) return;
  if (e.key !== "j" && e.key !== "k") return;
  const open = location.hash.startsWith("#q=") ? decodeURIComponent(location.hash.slice(3)) : "";
  const i = shown.indexOf(open);
  const next = e.key === "j" ? (i < 0 ? 0 : Math.min(i + 1, shown.length - 1)) : Math.max(i - 1, 0);
  if (shown.length) {
    openQuestion(shown[next]);
    const row = document.querySelector(`#question-body > [data-qid="${CSS.escape(shown[next])}"]`);
    if (row) row.scrollIntoView({block: "nearest"});
  }
});

renderList();
renderDiff();
if (location.hash.startsWith("#q=")) openQuestion(decodeURIComponent(location.hash.slice(3)));
