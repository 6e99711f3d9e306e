// The event inspector: the tab's AG-UI events grouped by run. A message's text deltas fold
// into one entry (its text), a tool call's start/args/end/result into one (with how long its
// arguments streamed and how long the result took); each run shows its timeline (first
// event, tool waits, total) and token usage, state deltas show the state they lead to.
// Filter by type, search the events' JSON, export a run as JSON lines. Kept across a reload
// (sessionStorage: this tab only, bounded).

const MAX_EVENTS = 2000;
const MAX_EVENT_TYPES = 100;
// Characters of saved events at most (sessionStorage holds about 5 M per origin).
const MAX_SAVED_CHARS = 1024 * 1024;
const SAVED = "iobridge.events";

const $ = (id) => document.getElementById(id);

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function clock(date) {
  return date.toTimeString().slice(0, 8) + "." + String(date.getMilliseconds()).padStart(3, "0");
}

/** ``45 ms``, ``1.23 s``. */
export function duration(ms) {
  return ms < 1000 ? `${Math.max(0, Math.round(ms))} ms` : `${(ms / 1000).toFixed(2)} s`;
}

const TEXT = new Set(["TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END",
                      "TEXT_MESSAGE_CHUNK"]);
const REASONING = new Set(["REASONING_MESSAGE_START", "REASONING_MESSAGE_CONTENT",
                           "REASONING_MESSAGE_END", "REASONING_MESSAGE_CHUNK",
                           "THINKING_TEXT_MESSAGE_START", "THINKING_TEXT_MESSAGE_CONTENT",
                           "THINKING_TEXT_MESSAGE_END"]);
const TOOL = new Set(["TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_RESULT",
                      "TOOL_CALL_CHUNK"]);
const TERMINAL = new Set(["RUN_FINISHED", "RUN_ERROR"]);

/** The entry an event folds into (``null``: an entry of its own). */
function groupKey(event) {
  if (TEXT.has(event.type)) return `text:${event.messageId ?? ""}`;
  if (REASONING.has(event.type)) return `reasoning:${event.messageId ?? ""}`;
  if (TOOL.has(event.type) && event.toolCallId) return `tool:${event.toolCallId}`;
  return null;
}

// ---------------------------------------------------------------- JSON Patch (RFC 6902)

function pointer(path) {
  if (path === "") return [];
  if (!path.startsWith("/")) throw new Error(`bad path ${path}`);
  return path.slice(1).split("/").map((t) => t.replaceAll("~1", "/").replaceAll("~0", "~"));
}

function walk(doc, tokens) {
  let node = doc;
  for (const token of tokens) {
    if (node === null || typeof node !== "object" || !(token in node)) {
      throw new Error(`no /${tokens.join("/")}`);
    }
    node = node[token];
  }
  return node;
}

function put(doc, tokens, value, insert) {
  if (!tokens.length) return value;
  const parent = walk(doc, tokens.slice(0, -1));
  const last = tokens.at(-1);
  if (Array.isArray(parent)) {
    const index = last === "-" ? parent.length : Number(last);
    if (insert) parent.splice(index, 0, value);
    else parent[index] = value;
  } else {
    parent[last] = value;
  }
  return doc;
}

function take(doc, tokens) {
  const parent = walk(doc, tokens.slice(0, -1));
  const last = tokens.at(-1);
  walk(doc, tokens);
  if (Array.isArray(parent)) parent.splice(Number(last), 1);
  else delete parent[last];
  return doc;
}

/** ``state`` after ``ops`` (a copy), or an Error saying which operation did not apply. */
export function applyPatch(state, ops) {
  let doc = structuredClone(state ?? {});
  for (const op of ops) {
    const tokens = pointer(op.path);
    if (op.op === "add") doc = put(doc, tokens, structuredClone(op.value), true);
    else if (op.op === "replace") doc = put(doc, tokens, structuredClone(op.value), false);
    else if (op.op === "remove") doc = take(doc, tokens);
    else if (op.op === "copy") doc = put(doc, tokens, structuredClone(walk(doc, pointer(op.from))), true);
    else if (op.op === "move") {
      const value = walk(doc, pointer(op.from));
      doc = put(take(doc, pointer(op.from)), tokens, value, true);
    } else if (op.op === "test") {
      if (JSON.stringify(walk(doc, tokens)) !== JSON.stringify(op.value)) {
        throw new Error(`test failed at ${op.path}`);
      }
    } else throw new Error(`unknown op ${op.op}`);
  }
  return doc;
}

// ---------------------------------------------------------------- one run's entries

function entries(records) {
  const list = [];
  const groups = new Map();
  for (const record of records) {
    const key = groupKey(record.event);
    if (key === null) {
      list.push({ key: null, records: [record] });
      continue;
    }
    let group = groups.get(key);
    if (!group) {
      group = { key, records: [] };
      groups.set(key, group);
      list.push(group);
    }
    group.records.push(record);
  }
  return list;
}

function find(records, type) {
  return records.find((r) => r.event.type === type);
}

/** What a folded entry says: its label, its figures, and its text. */
function describe(entry) {
  const { records } = entry;
  const events = records.map((r) => r.event);
  const deltas = events.filter((e) => e.type.endsWith("_CONTENT") || e.type.endsWith("_CHUNK")
                                      || e.type === "TOOL_CALL_ARGS");
  if (entry.key.startsWith("tool:")) {
    const start = find(records, "TOOL_CALL_START");
    const end = find(records, "TOOL_CALL_END");
    const result = find(records, "TOOL_CALL_RESULT");
    const name = start?.event.toolCallName ?? events.find((e) => e.toolCallName)?.toolCallName;
    const args = deltas.map((e) => e.delta ?? "").join("");
    const figures = [];
    if (start && end) figures.push(`arguments ${duration(end.at - start.at)}`);
    if (end && result) figures.push(`waited ${duration(result.at - end.at)} for its result`);
    else if (!result) figures.push("no result");
    let text = `arguments: ${args || "{}"}`;
    if (result) {
      const content = result.event.content;
      text += `\nresult: ${typeof content === "string" ? content : JSON.stringify(content)}`;
    }
    return { label: `TOOL_CALL ${name ?? "?"}`, figures, text,
             wait: end && result ? result.at - end.at : null };
  }
  const kind = entry.key.startsWith("text:") ? "TEXT_MESSAGE" : "REASONING";
  const text = deltas.map((e) => e.delta ?? "").join("");
  return { label: kind, text,
           figures: [`${deltas.length} delta${deltas.length === 1 ? "" : "s"}`,
                     `${text.length} characters`] };
}

/** First event, tool waits, total, usage: the run's head line. */
function timeline(records, waits) {
  const first = records[0];
  const parts = [];
  if (first.sent) parts.push(`first event after ${duration(first.at - first.sent)}`);
  if (waits.length) {
    const total = waits.reduce((sum, w) => sum + w, 0);
    parts.push(`${waits.length} tool call${waits.length === 1 ? "" : "s"} waited ${duration(total)}`);
  }
  const terminal = records.find((r) => TERMINAL.has(r.event.type));
  if (terminal) {
    parts.push(`total ${duration(terminal.at - (first.sent || first.at))}`);
  } else {
    parts.push("running…");
  }
  return parts.join(" · ");
}

function usageLine(records) {
  const terminal = records.find((r) => TERMINAL.has(r.event.type));
  const usage = Array.isArray(terminal?.event.usage) ? terminal.event.usage : [];
  return usage.map((u) => {
    const who = [u.provider, u.model].filter(Boolean).join("/") || "model";
    const counts = [["inputTokens", "in"], ["outputTokens", "out"], ["totalTokens", "total"],
                    ["reasoningTokens", "reasoning"]]
      .filter(([key]) => Number.isFinite(u[key])).map(([key, name]) => `${u[key]} ${name}`);
    return `${who}: ${counts.join(" · ")}`;
  }).join("; ");
}

function pre(text, className = "") {
  return element("pre", className, text);
}

/** Raw events of a folded entry, drawn when opened (a long reply has thousands). */
function rawEvents(records) {
  const details = element("details", "raw");
  details.append(element("summary", "", `${records.length} events`));
  details.addEventListener("toggle", () => {
    if (details.open && details.childElementCount === 1) {
      details.append(pre(records.map((r) => JSON.stringify(r.event)).join("\n")));
    }
  }, { once: false });
  return details;
}

/** One run as a section: head (id, label, timeline, usage, export) and its entries. */
function runSection(runId, records) {
  const section = element("li", "run");
  section.dataset.runId = runId;
  const head = element("div", "run-head");
  head.title = runId;
  const label = records.at(-1).label;
  head.append(element("strong", "", `Run ${runId.slice(0, 8)}`));
  if (label) head.append(element("span", "", ` · ${label}`));
  const exporter = element("button", "export", "Export JSON lines");
  exporter.type = "button";
  exporter.title = `Download run ${runId}'s events, one JSON object a line`;
  exporter.addEventListener("click", () => exportRun(runId, records));
  head.append(exporter);
  const list = element("ol", "run-events");
  const waits = [];
  let state;
  for (const entry of entries(records)) {
    const first = entry.records[0];
    const item = element("li");
    const types = [...new Set(entry.records.map((r) => r.event.type))];
    item.dataset.type = first.event.type;
    item.dataset.types = types.join(" ");
    item.append(element("span", "time", `${clock(new Date(first.at))} +${first.since.toFixed(3)}s`));
    if (entry.key === null) {
      const { event } = first;
      item.append(element("span", `type${event.type === "RUN_ERROR" ? " error" : ""}`, event.type),
                  pre(JSON.stringify(event, null, 2)));
      if (event.type === "STATE_SNAPSHOT") {
        state = event.snapshot;
        item.classList.add("state");
      } else if (event.type === "STATE_DELTA") {
        item.classList.add("state");
        try {
          state = applyPatch(state, Array.isArray(event.delta) ? event.delta : []);
          item.append(element("div", "label", "state after"), pre(JSON.stringify(state, null, 2),
                                                                   "state-after"));
        } catch (error) {
          item.append(element("div", "error-text", `not applied here: ${error.message}`));
        }
      }
    } else {
      const { label: name, figures, text, wait } = describe(entry);
      if (wait !== undefined && wait !== null) waits.push(wait);
      item.classList.add("group");
      item.append(element("span", "type", name), element("span", "figures", figures.join(" · ")),
                  pre(text, "folded"), rawEvents(entry.records));
    }
    list.append(item);
  }
  const facts = element("div", "run-facts");
  facts.append(element("div", "run-timeline", timeline(records, waits)));
  const usage = usageLine(records);
  if (usage) facts.append(element("div", "run-usage", `usage ${usage}`));
  section.append(head, facts, list);
  return section;
}

function exportRun(runId, records) {
  const lines = records.map((r) => JSON.stringify(r.event)).join("\n") + "\n";
  const url = URL.createObjectURL(new Blob([lines], { type: "application/x-ndjson" }));
  const link = element("a");
  link.href = url;
  link.download = `run-${runId}.jsonl`;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

/** One inspector over ``#events``, ``#event-filter``, ``#event-search``, ``#clear-events``. */
export class Inspector {
  constructor() {
    // {runId, label, sent (ms the request left, or 0), at (ms), since (s from the run's first
    // event), event}, oldest first.
    this.records = [];
    this.runs = new Map(); // runId -> {started (ms), sent (ms), label}
    this.dirty = new Set();
    this.queued = false;
    this.types = new Set();
    $("event-filter").addEventListener("change", () => this.applyFilter());
    $("event-search").addEventListener("input", () => this.applyFilter());
    $("clear-events").addEventListener("click", () => this.clear());
    addEventListener("pagehide", () => this.save());
  }

  /** A run begins: its events are shown under ``label`` (agent, thread). */
  startRun(runId, label) {
    this.runs.set(runId, { started: null, sent: Date.now(), label });
    if (this.runs.size > MAX_EVENTS) this.runs.delete(this.runs.keys().next().value);
  }

  log(runId, event) {
    const at = Date.now();
    const run = this.runs.get(runId) ?? { started: null, sent: 0, label: "" };
    run.started ??= at;
    this.runs.set(runId, run);
    this.add({ runId, label: run.label, sent: run.sent, at, since: (at - run.started) / 1000,
               event });
  }

  add(record) {
    this.records.push(record);
    this.dirty.add(record.runId);
    if (this.records.length > MAX_EVENTS) this.dirty.add(this.records.shift().runId);
    if (!this.queued) {
      this.queued = true;
      requestAnimationFrame(() => this.draw());
    }
  }

  /** Redraw the runs that changed since the last frame (one layout per frame). */
  draw() {
    this.queued = false;
    const list = $("events");
    const follow = list.scrollTop + list.clientHeight >= list.scrollHeight - 40;
    const byRun = new Map([...this.dirty].map((id) => [id, []]));
    this.dirty.clear();
    for (const record of this.records) byRun.get(record.runId)?.push(record);
    const filterBox = $("event-filter");
    for (const [runId, records] of byRun) {
      const old = [...list.children].find((s) => s.dataset.runId === runId);
      if (!records.length) {
        old?.remove();
        continue;
      }
      // What the user opened stays open.
      const opened = new Set([...(old?.querySelectorAll("details.raw[open]") ?? [])]
        .map((d) => [...d.closest(".run-events").children].indexOf(d.parentElement)));
      const section = runSection(runId, records);
      const items = section.querySelector(".run-events").children;
      for (const index of opened) items[index]?.querySelector("details.raw")?.setAttribute("open", "");
      if (old) old.replaceWith(section);
      else list.append(section);
      for (const record of records) {
        const { type } = record.event;
        if (this.types.size < MAX_EVENT_TYPES && !this.types.has(type)) {
          this.types.add(type);
          filterBox.append(new Option(type, type));
        }
      }
    }
    this.applyFilter();
    if (follow) list.scrollTop = list.scrollHeight;
  }

  /** Show the entries with an event of the chosen type whose JSON holds the search text. */
  applyFilter() {
    const type = $("event-filter").value;
    const query = $("event-search").value.trim().toLowerCase();
    for (const section of $("events").children) {
      let shown = 0;
      const records = query ? this.records.filter((r) => r.runId === section.dataset.runId) : [];
      const entryList = query ? entries(records) : [];
      [...section.querySelector(".run-events").children].forEach((item, index) => {
        let match = !type || item.dataset.types.split(" ").includes(type);
        if (match && query) {
          const entry = entryList[index];
          match = Boolean(entry) && entry.records.some(
            (r) => JSON.stringify(r.event).toLowerCase().includes(query));
        }
        item.classList.toggle("hidden", !match);
        if (match) shown += 1;
      });
      section.classList.toggle("hidden", shown === 0);
    }
  }

  clear() {
    $("events").replaceChildren();
    this.records = [];
    this.dirty.clear();
    sessionStorage.removeItem(SAVED);
  }

  /** Keep the latest events for a reload of this tab, at most MAX_SAVED_CHARS of them. */
  save() {
    const parts = this.records.map((r) => JSON.stringify(r));
    let size = parts.reduce((sum, part) => sum + part.length + 1, 2);
    let first = 0;
    while (size > MAX_SAVED_CHARS && first < parts.length) size -= parts[first++].length + 1;
    try {
      sessionStorage.setItem(SAVED, `[${parts.slice(first).join(",")}]`);
    } catch {
      sessionStorage.removeItem(SAVED); // storage full: a reload starts empty
    }
  }

  /** Redraw the events saved before a reload. */
  restore() {
    let saved;
    try {
      saved = JSON.parse(sessionStorage.getItem(SAVED) || "[]");
    } catch {
      saved = [];
    }
    if (!Array.isArray(saved)) return;
    for (const record of saved.slice(-MAX_EVENTS)) {
      if (!record || typeof record.runId !== "string" || !record.event
          || typeof record.event.type !== "string") continue;
      this.records.push({ runId: record.runId, label: String(record.label ?? ""),
                          sent: Number(record.sent) || 0, at: Number(record.at) || Date.now(),
                          since: Number(record.since) || 0, event: record.event });
      this.dirty.add(record.runId);
    }
    if (this.records.length) this.draw();
  }
}
