// The playground: the whole io.Intelligence flow with no library. POST {prefix}/run, read the
// SSE stream, run frontend tools in the page (or answer them from a form) and POST their
// results back into the same run; threads and history through the REST routes.
//
// One phase at a time (connecting, loading a thread, idle, running): Send works only when
// idle, so a message always goes to the thread on screen and its run is shown there. A new
// thread is only an id until its first message creates it on the server.
import { renderInto } from "./markdown.js";
import { Inspector } from "./inspector.js";
import { Attachments, partPreview } from "./attachments.js";

const PREFIX = document.documentElement.dataset.prefix || "/io-bridge";
// A thread's history is read as its latest messages, at most this many.
const HISTORY_LIMIT = 200;
// Characters of an unavailable agent's reason shown in the picker (the whole one is its title).
const REASON_CHARS = 120;
const STORE = { thread: "iobridge.thread", tools: "iobridge.tools", settings: "iobridge.settings",
                key: "iobridge.auth.key", scheme: "iobridge.auth.scheme" };
const WIDE = matchMedia("(min-width: 900px)");
const $ = (id) => document.getElementById(id);
const uid = () => crypto.randomUUID();

const BUILTIN_TOOLS = [
  { name: "get_weather", description: "Current weather for a city (runs in the browser).",
    parameters: { type: "object", properties: { city: { type: "string" } } },
    run: (args) => ({ city: args.city || "somewhere", sky: "clear", temperature: 21 }) },
  { name: "show_notice", description: "Show a notice to the user (runs in the browser).",
    parameters: { type: "object", properties: { text: { type: "string" } } },
    run: (args) => { notice(`notice: ${args.text || "(empty)"}`); return { shown: true }; } },
];

const state = {
  agents: [],
  defaultAgent: null,
  threadId: null,
  // Whether the thread on screen is stored on the server (false: a new thread's id only).
  stored: false,
  threads: [],
  nextCursor: null,
  // "connecting" | "loading" | "idle" | "running"
  phase: "connecting",
  // Each thread selection gets a number; a history that arrives for an older one is dropped.
  selection: 0,
  run: null, // {runId, threadId, stopping}
  customTools: loadCustomTools(),
  settings: loadSettings(),
};
const inspector = new Inspector();
const attachments = new Attachments({
  element: (...args) => element(...args),
  onProblem: (text) => { $("attach-problem").textContent = text; },
});

// ---------------------------------------------------------------- settings

function loadSettings() {
  const defaults = { autoAnswer: true, agent: null, disabledTools: [] };
  try {
    const saved = JSON.parse(localStorage.getItem(STORE.settings) || "{}");
    if (!saved || typeof saved !== "object") return defaults;
    return {
      autoAnswer: typeof saved.autoAnswer === "boolean" ? saved.autoAnswer : defaults.autoAnswer,
      agent: typeof saved.agent === "string" ? saved.agent : null,
      disabledTools: Array.isArray(saved.disabledTools)
        ? saved.disabledTools.filter((n) => typeof n === "string") : [],
    };
  } catch {
    return defaults;
  }
}

function saveSettings() {
  localStorage.setItem(STORE.settings, JSON.stringify(state.settings));
}

// ---------------------------------------------------------------- HTTP

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

function authHeaders() {
  const key = sessionStorage.getItem(STORE.key);
  if (!key) return {};
  return sessionStorage.getItem(STORE.scheme) === "bearer"
    ? { Authorization: `Bearer ${key}` }
    : { "X-API-Key": key };
}

async function errorOf(response) {
  let code = `HTTP_${response.status}`;
  let message = response.statusText || "request failed";
  try {
    const body = await response.json();
    if (body && body.error) {
      code = body.error.code || code;
      message = body.error.message || message;
    }
  } catch { /* not JSON: keep the status line */ }
  return new ApiError(response.status, code, message);
}

async function request(method, url, body, extra = {}) {
  const headers = { ...authHeaders() };
  // The server refuses a POST/PATCH not declared as JSON, even an empty one such as cancel
  // (its cross-site guard).
  if (body !== undefined || method === "POST" || method === "PATCH") {
    headers["content-type"] = "application/json";
  }
  const response = await fetch(url, {
    method, headers, body: body === undefined ? undefined : JSON.stringify(body), ...extra,
  });
  if (!response.ok) throw await errorOf(response);
  return response;
}

async function api(method, path, body) {
  const response = await request(method, PREFIX + path, body);
  return response.status === 204 ? null : response.json();
}

/** A sentence for a person, never raw JSON. */
function explain(error) {
  if (!(error instanceof ApiError)) return `Network error: ${error.message || error}`;
  if (error.status === 401) {
    markAuthNeeded(true);
    return "The server needs credentials: enter an API key or bearer token at the top right "
      + `(${error.message}).`;
  }
  if (error.status === 413) {
    return `The server refused the message as too large: ${error.message} (${error.code}, `
      + "HTTP 413). Your text and attachments are back in the composer: remove an attachment "
      + "and send again.";
  }
  if (error.code === "UNSUPPORTED_MEDIA") {
    return `The agent does not take one of the attachments: ${error.message} (${error.code}). `
      + "Your text and attachments are back in the composer.";
  }
  if (error.code === "THREAD_BUSY") {
    return "This thread already has a run in progress: wait for it to finish or press Stop.";
  }
  return `${error.message} (${error.code}, HTTP ${error.status})`;
}

// ---------------------------------------------------------------- phases

const PHASE_NOTES = {
  connecting: "Connecting to the server…",
  loading: "Loading the thread…",
  idle: "",
  running: "The agent is answering: Stop ends the run.",
};

function setPhase(phase) {
  state.phase = phase;
  document.body.dataset.phase = phase;
  updateControls();
}

function updateControls() {
  const running = state.phase === "running";
  $("send").disabled = state.phase !== "idle";
  $("stop").disabled = !running || Boolean(state.run?.stopping);
  $("agent").disabled = running;
  attachments.setDisabled(running || state.phase === "connecting");
  $("new-thread").disabled = running || state.phase === "connecting";
  for (const button of $("threads").querySelectorAll("button")) button.disabled = running;
  $("composer").classList.toggle("busy", running);
  $("composer-status").textContent = PHASE_NOTES[state.phase];
}

// ---------------------------------------------------------------- chat rendering

function scrollChat() {
  const chat = $("chat");
  chat.scrollTop = chat.scrollHeight;
}

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

/** Copy ``text`` to the clipboard, saying so (or why not) next to the button. */
async function copyText(button, text) {
  const label = button.textContent;
  try {
    await navigator.clipboard.writeText(text);
    button.textContent = "Copied";
  } catch (error) {
    button.textContent = "Copy failed";
    button.title = String(error?.message ?? error);
  }
  setTimeout(() => { button.textContent = label; }, 1500);
}

/** The row of actions under a message: ``[label, () => text]`` pairs, each copies. */
function messageTools(kind, actions) {
  const row = element("div", `msg-tools ${kind}`);
  for (const [label, text, help] of actions) {
    const button = element("button", "", label);
    button.type = "button";
    button.setAttribute("aria-label", help);
    button.addEventListener("click", () => copyText(button, text()));
    row.append(button);
  }
  $("chat").append(row);
  return row;
}

/** A user bubble: its text, its attachments (thumbnails), copy and (for a run) copy as curl. */
function addUser(text, parts = [], body = null) {
  const bubble = element("div", "msg user", text);
  const media = parts.filter((p) => p && p.type !== "text");
  if (media.length) {
    const list = element("div", "attachments");
    list.append(...media.map((part) => partPreview(part, element)));
    bubble.append(list);
  }
  $("chat").append(bubble);
  const actions = [["Copy", () => text, "Copy this message"]];
  if (body) {
    actions.push(["Copy as curl", () => curlFor(body), "Copy as curl: this request as a shell command"]);
  }
  messageTools("user", actions);
  scrollChat();
}

/** A shell command that sends ``body`` again (fresh run and message ids, so the server takes
 * it as a new turn); a credential is named as $IOBRIDGE_API_KEY, never copied. */
function curlFor(body) {
  const again = { ...body, runId: uid(),
                  messages: body.messages.map((m) => ({ ...m, id: uid() })) };
  const quote = (text) => `'${text.replaceAll("'", "'\\''")}'`;
  const url = new URL(`${PREFIX}/run`, location.href).href;
  const lines = [`curl -N ${quote(url)}`, "-H 'content-type: application/json'",
                 "-H 'accept: text/event-stream'"];
  if (sessionStorage.getItem(STORE.key)) {
    lines.push(sessionStorage.getItem(STORE.scheme) === "bearer"
      ? '-H "Authorization: Bearer $IOBRIDGE_API_KEY"' : '-H "X-API-Key: $IOBRIDGE_API_KEY"');
  }
  lines.push(`--data-raw ${quote(JSON.stringify(again))}`);
  return lines.join(" \\\n  ");
}

function addError(text) {
  $("chat").append(element("div", "msg error", text));
  scrollChat();
}

function notice(text) {
  $("chat").append(element("div", "msg notice", text));
  scrollChat();
}

/** An assistant bubble whose Markdown is re-rendered (once per frame) as deltas arrive. */
function assistantBubble(initial = "") {
  const node = element("div", "msg assistant");
  $("chat").append(node);
  let text = initial;
  messageTools("assistant", [["Copy", () => text, "Copy this reply (Markdown)"]]);
  let queued = false;
  const render = () => {
    queued = false;
    renderInto(node, text);
    scrollChat();
  };
  render();
  return {
    node,
    append(delta) {
      text += delta;
      if (!queued) {
        queued = true;
        requestAnimationFrame(render);
      }
    },
    flush: render,
  };
}

/** Reasoning, folded by default. */
function reasoningBlock(initial = "") {
  const details = element("details", "reasoning");
  details.append(element("summary", "", "Reasoning"));
  const body = element("div", "", initial);
  details.append(body);
  $("chat").append(details);
  scrollChat();
  return { append(delta) { body.textContent += delta; } };
}

function pretty(text) {
  if (text === undefined || text === null || text === "") return "";
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return String(text);
  }
}

/** A tool call: name, origin, arguments and (later) its result, in one card. */
function toolCard(toolCallId, name, origin) {
  const card = element("div", `tool-card ${origin}`);
  card.dataset.toolCallId = toolCallId;
  const head = element("header");
  head.append(element("span", "name", name), element("span", `badge ${origin}`, origin));
  const status = element("span", "status", "running");
  head.append(status);
  const args = element("div", "section");
  args.append(element("div", "label", "arguments"));
  const argsPre = element("pre", "args");
  args.append(argsPre);
  const result = element("div", "section");
  result.hidden = true;
  result.append(element("div", "label", "result"));
  const resultPre = element("pre", "result");
  result.append(resultPre);
  const answer = element("div", "section answer");
  answer.hidden = true;
  card.append(head, args, result, answer);
  $("chat").append(card);
  scrollChat();
  let rawArgs = "";
  return {
    card, name, origin, answer,
    appendArgs(delta) {
      rawArgs += delta;
      argsPre.textContent = rawArgs;
    },
    setArgs(text) {
      rawArgs = text;
      argsPre.textContent = pretty(text) || "{}";
    },
    args() {
      try {
        const parsed = JSON.parse(rawArgs || "{}");
        return parsed && typeof parsed === "object" ? parsed : {};
      } catch {
        return {};
      }
    },
    setStatus(text, failed = false) {
      status.textContent = text;
      card.classList.toggle("failed", failed);
    },
    setResult(content, failed = false) {
      result.hidden = false;
      resultPre.textContent = pretty(content);
      answer.hidden = true;
      answer.replaceChildren();
      this.setStatus(failed ? "error" : "done", failed);
    },
  };
}

// ---------------------------------------------------------------- frontend tools

function loadCustomTools() {
  try {
    const tools = JSON.parse(localStorage.getItem(STORE.tools) || "[]");
    return Array.isArray(tools) ? tools.filter((t) => t && typeof t.name === "string") : [];
  } catch {
    return [];
  }
}

function saveCustomTools() {
  localStorage.setItem(STORE.tools, JSON.stringify(state.customTools));
}

function declaredTools() {
  const off = new Set(state.settings.disabledTools);
  return [...BUILTIN_TOOLS, ...state.customTools].filter((t) => !off.has(t.name));
}

function renderTools() {
  const off = new Set(state.settings.disabledTools);
  const rows = [...BUILTIN_TOOLS, ...state.customTools].map((tool) => {
    const row = element("label", "row");
    const box = element("input");
    box.type = "checkbox";
    box.checked = !off.has(tool.name);
    box.dataset.tool = tool.name;
    box.addEventListener("change", () => {
      const others = state.settings.disabledTools.filter((n) => n !== tool.name);
      state.settings.disabledTools = box.checked ? others : [...others, tool.name];
      saveSettings();
    });
    row.append(box, element("code", "", tool.name),
               element("span", "muted", tool.run ? "built-in" : "answered from a form"));
    if (!tool.run) {
      const remove = element("button", "remove", "remove");
      remove.type = "button";
      remove.setAttribute("aria-label", `Remove the tool ${tool.name}`);
      remove.addEventListener("click", (event) => {
        event.preventDefault();
        state.customTools = state.customTools.filter((t) => t.name !== tool.name);
        saveCustomTools();
        renderTools();
      });
      row.append(remove);
    }
    return row;
  });
  $("tools").replaceChildren(...rows);
}

function addCustomTool(event) {
  event.preventDefault();
  const name = $("tool-name").value.trim();
  const raw = $("tool-parameters").value.trim();
  let parameters = { type: "object", properties: {} };
  try {
    if (raw) parameters = JSON.parse(raw);
    if (!parameters || typeof parameters !== "object" || Array.isArray(parameters)) {
      throw new Error("parameters must be a JSON object");
    }
  } catch (error) {
    $("tool-error").textContent = `Invalid JSON Schema: ${error.message}`;
    return;
  }
  if ([...BUILTIN_TOOLS, ...state.customTools].some((t) => t.name === name)) {
    $("tool-error").textContent = `A tool called ${name} is already declared.`;
    return;
  }
  state.customTools.push({ name, description: $("tool-description").value.trim(), parameters });
  saveCustomTools();
  $("tool-form").reset();
  $("tool-error").textContent = "";
  renderTools();
}

/** A form under a pending frontend call: send a result (JSON or text) or an error. */
function answerForm(runId, toolCallId, card, suggested) {
  const form = element("form");
  const label = element("label", "label", "your answer (JSON or text)");
  const input = element("textarea");
  input.rows = 3;
  input.name = "result";
  input.id = `answer-${toolCallId}`;
  label.htmlFor = input.id;
  input.value = suggested === undefined ? "" : JSON.stringify(suggested, null, 2);
  const buttons = element("div");
  const send = element("button", "primary", "Send result");
  send.type = "submit";
  const fail = element("button", "", "Send as error");
  fail.type = "button";
  const problem = element("span", "error-text");
  buttons.append(send, fail, problem);
  form.append(label, input, buttons);
  const submit = async (asError) => {
    const text = input.value;
    let body;
    if (asError) {
      body = { error: text || "failed in the browser" };
    } else {
      try {
        body = { result: JSON.parse(text) };
      } catch {
        body = { content: text };
      }
    }
    send.disabled = fail.disabled = true;
    const ok = await postToolResult(runId, toolCallId, card, body);
    if (!ok) send.disabled = fail.disabled = false;
    else problem.textContent = "";
  };
  form.addEventListener("submit", (event) => { event.preventDefault(); submit(false); });
  fail.addEventListener("click", () => submit(true));
  card.answer.replaceChildren(form);
  card.answer.hidden = false;
  card.setStatus("waiting for your answer");
  input.focus();
}

/** The open interrupts of a run that finished to ask: answer them all in one resume run. */
function interruptCard(interrupts) {
  const card = element("div", "tool-card interrupt");
  const answers = new Map();
  const buttons = [];
  const finishIfAnswered = () => {
    if (answers.size < interrupts.length) return;
    for (const button of buttons) button.disabled = true;
    run(null, [...answers.values()]);
  };
  for (const interrupt of interrupts) {
    const head = element("header");
    head.append(element("span", "name", interrupt.reason), element("span", "badge", "interrupt"));
    const status = element("span", "status", "waiting for your answer");
    head.append(status);
    const section = element("div", "section");
    section.append(element("div", "", interrupt.message || "The agent is waiting for you."));
    const row = element("div");
    for (const [label, entry] of [
      ["Approve", { status: "resolved", payload: { approved: true } }],
      ["Decline", { status: "resolved", payload: { approved: false } }],
      ["Cancel", { status: "cancelled" }],
    ]) {
      const button = element("button", label === "Approve" ? "primary" : "", label);
      button.type = "button";
      button.addEventListener("click", () => {
        if (state.phase !== "idle") return;
        answers.set(interrupt.id, { interruptId: interrupt.id, ...entry });
        status.textContent = label.toLowerCase();
        finishIfAnswered();
      });
      buttons.push(button);
      row.append(button);
    }
    section.append(row);
    card.append(head, section);
  }
  $("chat").append(card);
  scrollChat();
}

async function postToolResult(runId, toolCallId, card, body) {
  try {
    await request("POST", `${PREFIX}/runs/${encodeURIComponent(runId)}/tool-calls/`
      + `${encodeURIComponent(toolCallId)}/result`, body);
    card.setStatus("answered");
    return true;
  } catch (error) {
    card.setStatus(`not accepted: ${explain(error)}`, true);
    return false;
  }
}

function handleFrontendCall(runId, toolCallId, card) {
  const builtin = BUILTIN_TOOLS.find((t) => t.name === card.name);
  let suggested;
  if (builtin) {
    try {
      suggested = builtin.run(card.args());
    } catch (error) {
      suggested = { error: String(error) };
    }
  }
  if (builtin && state.settings.autoAnswer) {
    postToolResult(runId, toolCallId, card, { result: suggested });
  } else {
    answerForm(runId, toolCallId, card, suggested);
  }
}

// ---------------------------------------------------------------- runs

async function* sseEvents(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const frame = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      const data = frame.split("\n").filter((l) => l.startsWith("data:"))
        .map((l) => l.slice(l.startsWith("data: ") ? 6 : 5));
      if (data.length) yield JSON.parse(data.join("\n"));
    }
  }
}

function serverToolNames() {
  return new Set(state.agents.flatMap((a) => (a.tools || []).map((t) => t.name)));
}

/**
 * One run in the thread on screen: ``text`` as the new user message, or (``resume`` given)
 * answers to interrupts. Only called when idle; the thread cannot change until it ends.
 */
async function run(text, resume = null, parts = []) {
  if (state.phase !== "idle") return;
  const runId = uid();
  const threadId = state.threadId;
  const agentId = $("agent").value;
  const frontend = declaredTools();
  const frontendNames = new Set(frontend.map((t) => t.name));
  const body = {
    // No ``state``: the run starts from the thread's stored state (shown as STATE_SNAPSHOT).
    threadId, runId, context: [],
    tools: frontend.map(({ name, description, parameters }) => ({ name, description, parameters })),
    // Only the new message: the server keeps the thread's memory.
    messages: resume ? [] : [{ id: uid(), role: "user",
      content: parts.length ? [...(text ? [{ type: "text", text }] : []), ...parts] : text }],
    forwardedProps: { agentId, memoryOptions: { generateTitle: true } },
  };
  if (resume) body.resume = resume;
  if (text !== null) addUser(text, parts, body);
  state.run = { runId, threadId, stopping: false };
  setPhase("running");
  inspector.startRun(runId, `${agentId || "default agent"} · thread ${threadId.slice(0, 8)}`);
  const texts = new Map();
  const reasoning = new Map();
  const calls = new Map();
  let ended = false;
  let started = false;
  try {
    const response = await request("POST", `${PREFIX}/run`, body);
    started = true;
    if (parts.length) attachments.clear();
    for await (const event of sseEvents(response)) {
      inspector.log(runId, event);
      if (event.type === "RUN_STARTED") state.stored = true;
      ended ||= event.type === "RUN_FINISHED" || event.type === "RUN_ERROR";
      if (state.threadId !== threadId) continue; // never drawn into another thread
      switch (event.type) {
        case "TEXT_MESSAGE_START":
          texts.set(event.messageId, assistantBubble());
          break;
        case "TEXT_MESSAGE_CONTENT":
        case "TEXT_MESSAGE_CHUNK": {
          const id = event.messageId ?? [...texts.keys()].pop();
          if (!texts.has(id)) texts.set(id, assistantBubble());
          texts.get(id).append(event.delta ?? "");
          break;
        }
        case "TEXT_MESSAGE_END":
          texts.get(event.messageId)?.flush();
          break;
        case "REASONING_MESSAGE_START":
        case "THINKING_TEXT_MESSAGE_START":
          reasoning.set(event.messageId ?? "thinking", reasoningBlock());
          break;
        case "REASONING_MESSAGE_CONTENT":
        case "THINKING_TEXT_MESSAGE_CONTENT": {
          const id = event.messageId ?? "thinking";
          if (!reasoning.has(id)) reasoning.set(id, reasoningBlock());
          reasoning.get(id).append(event.delta ?? "");
          break;
        }
        case "TOOL_CALL_START": {
          const origin = frontendNames.has(event.toolCallName) ? "frontend" : "server";
          calls.set(event.toolCallId, toolCard(event.toolCallId, event.toolCallName, origin));
          break;
        }
        case "TOOL_CALL_ARGS":
          calls.get(event.toolCallId)?.appendArgs(event.delta);
          break;
        case "TOOL_CALL_END": {
          const card = calls.get(event.toolCallId);
          if (!card) break;
          card.setArgs(JSON.stringify(card.args()));
          if (card.origin === "frontend") handleFrontendCall(runId, event.toolCallId, card);
          break;
        }
        case "TOOL_CALL_RESULT": {
          const content = typeof event.content === "string"
            ? event.content : JSON.stringify(event.content);
          calls.get(event.toolCallId)?.setResult(content);
          break;
        }
        case "RUN_ERROR":
          addError(`The run failed: ${event.message}${event.code ? ` (${event.code})` : ""}`);
          break;
        case "RUN_FINISHED":
          if (event.outcome?.type === "cancelled") notice("Run stopped.");
          else if (event.outcome?.type === "interrupt") interruptCard(event.outcome.interrupts);
          break;
        default:
          break;
      }
    }
    for (const bubble of texts.values()) bubble.flush();
    if (!ended) addError("The stream closed before the run finished (no RUN_FINISHED).");
  } catch (error) {
    addError(explain(error));
    // Refused before it started: nothing was stored, so nothing the user wrote is lost.
    if (!started && text !== null && !$("text").value) $("text").value = text;
  } finally {
    for (const card of calls.values()) {
      if (!card.answer.hidden) {
        card.answer.hidden = true;
        card.setStatus("the run ended before an answer", true);
      }
    }
    state.run = null;
    inspector.save();
    setPhase("idle");
    refreshThreads().catch(() => {});
  }
}

async function stop() {
  const live = state.run;
  if (!live || live.stopping) return;
  live.stopping = true;
  updateControls();
  try {
    await api("POST", `/runs/${encodeURIComponent(live.runId)}/cancel`);
  } catch (error) {
    addError(`Could not stop the run: ${explain(error)}`);
    live.stopping = false;
    updateControls();
  }
}

// ---------------------------------------------------------------- history

function renderHistory(messages) {
  $("chat").replaceChildren();
  const serverTools = serverToolNames();
  const cards = new Map();
  for (const message of messages) {
    switch (message.role) {
      case "user": {
        const content = message.content;
        if (typeof content === "string") addUser(content);
        else {
          const parts = Array.isArray(content) ? content : [];
          addUser(parts.filter((p) => p?.type === "text").map((p) => p.text).join(" "), parts);
        }
        break;
      }
      case "assistant":
        if (message.content) assistantBubble(message.content);
        for (const call of message.toolCalls || []) {
          const name = call.function?.name ?? "tool";
          const card = toolCard(call.id, name, serverTools.has(name) ? "server" : "frontend");
          card.setArgs(call.function?.arguments || "{}");
          card.setStatus("no result");
          cards.set(call.id, card);
        }
        break;
      case "tool":
        cards.get(message.toolCallId)?.setResult(
          typeof message.content === "string" ? message.content : JSON.stringify(message.content),
          Boolean(message.error));
        break;
      case "reasoning":
        reasoningBlock(message.content || "");
        break;
      default:
        break;
    }
  }
}

/** Show a thread's history; ``false`` when a later selection took over meanwhile. */
async function loadHistory(threadId, selection) {
  try {
    const path = `/threads/${encodeURIComponent(threadId)}`;
    // The thread itself carries the interrupts its last run left open: asked again here.
    const [{ messages }, thread] = await Promise.all([
      api("GET", `${path}/messages?format=agui&limit=${HISTORY_LIMIT}`), api("GET", path),
    ]);
    if (selection !== state.selection) return false;
    state.stored = true;
    renderHistory(messages);
    if (messages.length >= HISTORY_LIMIT) {
      $("chat").prepend(element("div", "msg notice",
        `Showing the latest ${HISTORY_LIMIT} messages of this thread.`));
    }
    if (Array.isArray(thread?.interrupts) && thread.interrupts.length) {
      interruptCard(thread.interrupts);
    }
  } catch (error) {
    if (selection !== state.selection) return false;
    // Not stored yet (a new thread's id): an empty chat is right.
    if (!(error instanceof ApiError && error.status === 404)) addError(explain(error));
  }
  return true;
}

// ---------------------------------------------------------------- threads

function threadLabel(thread) {
  return thread.title || `Untitled · ${thread.id.slice(0, 8)}`;
}

function threadItem(thread, label) {
  const item = element("li");
  item.dataset.threadId = thread.id;
  const current = thread.id === state.threadId;
  item.classList.toggle("selected", current);
  const title = element("button", "title", label);
  title.type = "button";
  title.title = thread.id;
  if (current) title.setAttribute("aria-current", "true");
  title.addEventListener("click", () => selectThread(thread.id));
  item.append(title);
  return item;
}

function renderThreads() {
  const listed = state.threads.some((t) => t.id === state.threadId);
  const items = [];
  if (!listed && state.threadId) {
    // The thread on screen: a new one (stored with its first message), or one not listed.
    const draft = threadItem({ id: state.threadId }, state.stored
      ? `Thread · ${state.threadId.slice(0, 8)}` : "New thread");
    draft.classList.add("draft");
    items.push(draft);
  }
  for (const thread of state.threads) {
    const item = threadItem(thread, threadLabel(thread));
    const rename = element("button", "rename", "✎");
    rename.type = "button";
    rename.title = "Rename";
    rename.setAttribute("aria-label", `Rename ${threadLabel(thread)}`);
    const remove = element("button", "delete", "✕");
    remove.type = "button";
    remove.title = "Delete";
    remove.setAttribute("aria-label", `Delete ${threadLabel(thread)}`);
    item.append(rename, remove);
    rename.addEventListener("click", () => startRename(item, thread));
    remove.addEventListener("click", () => {
      if (!remove.classList.contains("confirm")) {
        remove.classList.add("confirm");
        remove.textContent = "delete?";
        remove.setAttribute("aria-label", `Press again to delete ${threadLabel(thread)}`);
        setTimeout(() => { remove.classList.remove("confirm"); remove.textContent = "✕"; }, 4000);
        return;
      }
      deleteThread(thread.id);
    });
    items.push(item);
  }
  $("threads").replaceChildren(...items);
  $("more-threads").hidden = !state.nextCursor;
  const current = state.threads.find((t) => t.id === state.threadId);
  $("thread-title").textContent = current ? threadLabel(current)
    : `New thread · ${state.threadId?.slice(0, 8) ?? ""}`;
  updateControls();
}

function startRename(item, thread) {
  const input = element("input");
  input.value = thread.title;
  input.setAttribute("aria-label", "Thread title");
  item.replaceChildren(input);
  input.focus();
  let done = false;
  const finish = async (save) => {
    if (done) return;
    done = true;
    if (save && input.value.trim() !== thread.title) {
      try {
        await api("PATCH", `/threads/${encodeURIComponent(thread.id)}`,
                  { title: input.value.trim() });
      } catch (error) {
        addError(`Could not rename the thread: ${explain(error)}`);
      }
    }
    await refreshThreads();
  };
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter") finish(true);
    if (event.key === "Escape") {
      event.stopPropagation(); // not the drawer's Escape
      finish(false);
    }
  });
  input.addEventListener("blur", () => finish(true));
}

async function refreshThreads(append = false) {
  const query = new URLSearchParams({ limit: "50" });
  if (append && state.nextCursor) query.set("cursor", state.nextCursor);
  const page = await api("GET", `/threads?${query}`);
  state.threads = append ? [...state.threads, ...page.threads] : page.threads;
  state.nextCursor = page.nextCursor ?? null;
  renderThreads();
}

function rememberThread(threadId) {
  localStorage.setItem(STORE.thread, threadId);
  const url = new URL(location.href);
  url.searchParams.set("thread", threadId);
  history.replaceState(null, "", url);
}

/** Show another thread: Send waits until its history is on screen. */
async function selectThread(threadId) {
  if (state.phase === "running") return; // a live run keeps its thread
  const selection = ++state.selection;
  state.threadId = threadId;
  state.stored = state.threads.some((t) => t.id === threadId);
  rememberThread(threadId);
  const thread = state.threads.find((t) => t.id === threadId);
  if (thread?.agentId && usableAgent(thread.agentId)) $("agent").value = thread.agentId;
  describeAgent();
  $("chat").replaceChildren();
  setPhase("loading");
  renderThreads();
  closeDrawers();
  if (await loadHistory(threadId, selection)) {
    renderThreads();
    setPhase("idle");
  }
}

/**
 * A new thread: a fresh id on screen, stored by the server with its first message (an empty
 * new thread on screen is kept rather than replaced).
 */
function newThread(fresh = false) {
  if (state.phase === "running" || state.phase === "connecting") return;
  state.selection += 1; // a history still loading for the previous thread is dropped
  if (fresh || state.stored || $("chat").childElementCount) {
    state.threadId = uid();
    state.stored = false;
    rememberThread(state.threadId);
    $("chat").replaceChildren();
  }
  renderThreads();
  setPhase("idle");
  closeDrawers();
  $("text").focus();
}

async function deleteThread(threadId) {
  try {
    await api("DELETE", `/threads/${encodeURIComponent(threadId)}`);
  } catch (error) {
    addError(`Could not delete the thread: ${explain(error)}`);
    return;
  }
  state.threads = state.threads.filter((t) => t.id !== threadId);
  if (threadId === state.threadId) newThread(true);
  await refreshThreads();
}

// ---------------------------------------------------------------- agents and auth

function agentUnavailable(agent) {
  return agent.status === "unavailable";
}

function usableAgent(agentId) {
  return state.agents.some((a) => a.id === agentId && !agentUnavailable(a));
}

function renderAgents() {
  const options = state.agents.map((agent) => {
    const reason = String(agent.reason ?? "");
    const short = reason.length > REASON_CHARS ? `${reason.slice(0, REASON_CHARS - 1)}…` : reason;
    const label = agentUnavailable(agent)
      ? `${agent.name || agent.id} (unavailable${short ? `: ${short}` : ""})`
      : `${agent.name || agent.id} (${agent.id})`;
    const option = new Option(label, agent.id);
    option.disabled = agentUnavailable(agent);
    if (option.disabled) {
      option.className = "unavailable";
      option.title = reason;
    }
    return option;
  });
  $("agent").replaceChildren(...options);
  const usable = state.agents.filter((a) => !agentUnavailable(a));
  const preferred = usable.find((a) => a.id === state.settings.agent)
    ?? usable.find((a) => a.id === state.defaultAgent) ?? usable[0];
  if (preferred) $("agent").value = preferred.id;
  describeAgent();
}

function describeAgent() {
  const agent = state.agents.find((a) => a.id === $("agent").value);
  attachments.setAgent(agent);
  const unavailable = state.agents.filter(agentUnavailable).length;
  const parts = [];
  if (agent?.modelId) parts.push(agent.modelId);
  if (agent && agent.id === state.defaultAgent) parts.push("default");
  if (unavailable) parts.push(`${unavailable} unavailable`);
  $("agent-note").textContent = parts.join(" · ");
  $("agent-note").title = parts.join(" · ");
}

function markAuthNeeded(needed) {
  $("auth").classList.toggle("needed", needed);
  if (needed) $("auth-box").open = true;
  const banner = $("banner");
  banner.hidden = !needed;
  banner.textContent = needed
    ? "This server requires authentication: enter an API key (sent as X-API-Key) or a bearer "
      + "token, then press Use. It is kept for this browser tab only."
    : "";
}

async function connect() {
  if (state.phase === "running") return false;
  setPhase("connecting");
  try {
    const [config, { agents }] = await Promise.all([
      request("GET", "/playground/config.json").then((r) => r.json()),
      api("GET", "/agents"),
    ]);
    markAuthNeeded(false);
    state.defaultAgent = config.defaultAgent ?? null;
    attachments.setLimits(config.limits);
    state.agents = Array.isArray(agents) ? agents : [];
    renderAgents();
    await refreshThreads();
    await selectThread(state.threadId);
    return true;
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) markAuthNeeded(true);
    else addError(`Cannot reach the server: ${explain(error)}`);
    setPhase("connecting");
    $("composer-status").textContent = "Not connected.";
    return false;
  }
}

// ---------------------------------------------------------------- drawers (below 900 px)

let drawerOpener = null;

function openDrawer(id, opener) {
  closeDrawers(false);
  const drawer = $(id);
  drawer.classList.add("open");
  $("backdrop").hidden = false;
  for (const toggle of document.querySelectorAll(`.drawer-toggle[data-drawer="${id}"]`)) {
    toggle.setAttribute("aria-expanded", "true");
  }
  drawerOpener = opener ?? null;
  // Focus moves in once the drawer is visible (visibility changes with the class).
  requestAnimationFrame(() => {
    const target = drawer.querySelector("[aria-current]")
      ?? drawer.querySelector("button:not(:disabled), summary, input");
    target?.focus();
  });
}

function closeDrawers(returnFocus = true) {
  const open = document.querySelector(".drawer.open");
  for (const drawer of document.querySelectorAll(".drawer.open")) drawer.classList.remove("open");
  for (const toggle of document.querySelectorAll(".drawer-toggle")) {
    toggle.setAttribute("aria-expanded", "false");
  }
  $("backdrop").hidden = true;
  if (open && returnFocus && drawerOpener && !WIDE.matches) drawerOpener.focus();
  drawerOpener = null;
}

function wireDrawers() {
  for (const toggle of document.querySelectorAll(".drawer-toggle")) {
    toggle.addEventListener("click", () => {
      if ($(toggle.dataset.drawer).classList.contains("open")) closeDrawers();
      else openDrawer(toggle.dataset.drawer, toggle);
    });
  }
  for (const close of document.querySelectorAll(".drawer-close")) {
    close.addEventListener("click", () => closeDrawers());
  }
  $("backdrop").addEventListener("click", () => closeDrawers());
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && document.querySelector(".drawer.open")) closeDrawers();
  });
  WIDE.addEventListener("change", () => closeDrawers(false));
}

// ---------------------------------------------------------------- wiring

async function send() {
  const text = $("text").value;
  if ((!text.trim() && !attachments.count) || state.phase !== "idle") return;
  const refusal = attachments.refusal(text);
  if (refusal) {
    $("attach-problem").textContent = refusal;
    return;
  }
  let parts = [];
  try {
    parts = await attachments.parts();
  } catch (error) {
    $("attach-problem").textContent = `An attachment could not be read: ${error.message}`;
    return;
  }
  if (state.phase !== "idle") return;
  $("text").value = "";
  $("attach-problem").textContent = "";
  run(text, null, parts);
}

function wireAttachments() {
  $("attach").addEventListener("click", () => $("attach-input").click());
  $("attach-input").addEventListener("change", () => {
    attachments.add([...$("attach-input").files]);
    $("attach-input").value = "";
  });
  const composer = $("composer");
  const carriesFiles = (event) => [...(event.dataTransfer?.types ?? [])].includes("Files");
  composer.addEventListener("dragover", (event) => {
    if (!carriesFiles(event)) return;
    event.preventDefault();
    composer.classList.add("dropping");
  });
  composer.addEventListener("dragleave", () => composer.classList.remove("dropping"));
  composer.addEventListener("drop", (event) => {
    composer.classList.remove("dropping");
    if (!carriesFiles(event)) return;
    event.preventDefault();
    if (attachments.disabled) return;
    attachments.add([...event.dataTransfer.files]);
  });
  $("text").addEventListener("paste", (event) => {
    const files = [...(event.clipboardData?.files ?? [])];
    if (!files.length || attachments.disabled) return;
    event.preventDefault();
    attachments.add(files);
  });
}

function init() {
  const params = new URLSearchParams(location.search);
  state.threadId = params.get("thread") || localStorage.getItem(STORE.thread) || uid();
  rememberThread(state.threadId);
  $("auth-key").value = sessionStorage.getItem(STORE.key) || "";
  $("auth-scheme").value = sessionStorage.getItem(STORE.scheme) || "api-key";
  $("auth-box").open = Boolean($("auth-key").value);
  $("auto-answer").checked = state.settings.autoAnswer;
  renderTools();
  inspector.restore();
  wireDrawers();
  wireAttachments();

  $("composer").addEventListener("submit", (event) => { event.preventDefault(); send(); });
  $("text").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      send();
    }
  });
  $("stop").addEventListener("click", stop);
  $("new-thread").addEventListener("click", () => newThread());
  $("more-threads").addEventListener("click", () => refreshThreads(true));
  $("agent").addEventListener("change", () => {
    state.settings.agent = $("agent").value;
    saveSettings();
    describeAgent();
  });
  $("auto-answer").addEventListener("change", () => {
    state.settings.autoAnswer = $("auto-answer").checked;
    saveSettings();
  });
  $("tool-form").addEventListener("submit", addCustomTool);
  $("auth").addEventListener("submit", (event) => {
    event.preventDefault();
    const key = $("auth-key").value.trim();
    if (key) sessionStorage.setItem(STORE.key, key);
    else sessionStorage.removeItem(STORE.key);
    sessionStorage.setItem(STORE.scheme, $("auth-scheme").value);
    connect();
  });
  $("auth-clear").addEventListener("click", () => {
    sessionStorage.removeItem(STORE.key);
    $("auth-key").value = "";
    connect();
  });

  // ?say=... fills in a first message (handy for demos); only a click or Enter sends it, so
  // a link from another site cannot make this tab run an agent.
  const say = params.get("say");
  if (say) $("text").value = say;
  connect().then((ok) => {
    if (ok && say) notice("The link filled in the message box: press Send to run it.");
  });
}

init();
