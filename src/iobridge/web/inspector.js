// The event inspector: every AG-UI event of the tab's runs, grouped under a heading per run,
// filtered by type, and kept across a reload (sessionStorage: this tab only, bounded).

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

/** One inspector over the ``#events`` list, ``#event-filter`` and ``#clear-events``. */
export class Inspector {
  constructor() {
    // {runId, at (ms), since (s from the run's first event), event}, oldest first.
    this.records = [];
    this.pending = [];
    this.runs = new Map(); // runId -> {started (ms), label}
    $("event-filter").addEventListener("change", () => this.applyFilter());
    $("clear-events").addEventListener("click", () => this.clear());
    addEventListener("pagehide", () => this.save());
  }

  /** A run begins: its events are shown under ``label`` (agent, thread). */
  startRun(runId, label) {
    this.runs.set(runId, { started: null, label });
    // Only runs with events still listed need their heading (at most MAX_EVENTS of them).
    if (this.runs.size > MAX_EVENTS) this.runs.delete(this.runs.keys().next().value);
  }

  log(runId, event) {
    const at = Date.now();
    const run = this.runs.get(runId) ?? { started: null, label: "" };
    run.started ??= at;
    this.runs.set(runId, run);
    if (this.pending.length === 0) requestAnimationFrame(() => this.draw());
    const record = { runId, label: run.label, at, since: (at - run.started) / 1000, event };
    this.pending.push(record);
    this.records.push(record);
    if (this.records.length > MAX_EVENTS) this.records.shift();
    if (this.pending.length > MAX_EVENTS) this.pending.shift();
  }

  /** Draw the events logged since the last frame (one layout per frame, not per event). */
  draw() {
    const batch = this.pending;
    this.pending = [];
    const list = $("events");
    const filterBox = $("event-filter");
    const known = new Set([...filterBox.options].map((o) => o.value));
    const fragment = document.createDocumentFragment();
    let lastRun = list.lastElementChild?.dataset.runId;
    for (const { runId, label, at, since, event } of batch) {
      if (runId !== lastRun) {
        const head = element("li", "run-head", `Run ${runId.slice(0, 8)}${label ? ` · ${label}` : ""}`);
        head.dataset.runId = runId;
        head.title = runId;
        fragment.append(head);
        lastRun = runId;
      }
      const item = element("li");
      item.dataset.type = event.type;
      item.dataset.runId = runId;
      item.append(element("span", "time", `${clock(new Date(at))} +${since.toFixed(3)}s`),
                  element("span", `type${event.type === "RUN_ERROR" ? " error" : ""}`, event.type),
                  element("pre", "", JSON.stringify(event, null, 2)));
      fragment.append(item);
      if (known.size < MAX_EVENT_TYPES && !known.has(event.type)) {
        known.add(event.type);
        filterBox.append(new Option(event.type, event.type));
      }
    }
    list.append(fragment);
    let events = list.querySelectorAll("li:not(.run-head)").length;
    while (events > MAX_EVENTS) {
      const first = list.firstElementChild;
      if (!first.classList.contains("run-head")) events -= 1;
      first.remove();
    }
    // A heading whose events were all dropped goes too.
    while (list.firstElementChild?.classList.contains("run-head")
           && list.firstElementChild.nextElementSibling?.classList.contains("run-head")) {
      list.firstElementChild.remove();
    }
    if (filterBox.value) this.applyFilter();
    list.scrollTop = list.scrollHeight;
  }

  /** Show the events of the chosen type, under the headings of the runs that have any. */
  applyFilter() {
    const filter = $("event-filter").value;
    let head = null;
    let shown = false;
    const closeRun = () => head?.classList.toggle("hidden", !shown);
    for (const item of $("events").children) {
      if (item.classList.contains("run-head")) {
        closeRun();
        head = item;
        shown = false;
        continue;
      }
      const hidden = Boolean(filter) && item.dataset.type !== filter;
      item.classList.toggle("hidden", hidden);
      shown ||= !hidden;
    }
    closeRun();
  }

  clear() {
    $("events").replaceChildren();
    this.pending = [];
    this.records = [];
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
      const entry = { runId: record.runId, label: String(record.label ?? ""),
                      at: Number(record.at) || Date.now(), since: Number(record.since) || 0,
                      event: record.event };
      this.records.push(entry);
      this.pending.push(entry);
    }
    if (this.pending.length) this.draw();
  }
}
