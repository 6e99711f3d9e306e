// Drive one run with the real @ag-ui/client HttpAgent and print what it saw as JSON.
//
// Usage: node run_agent.mjs '<scenario JSON>'
// scenario = { baseUrl, threadId, runId, text, tools, frontendResults: { toolName: value },
//              timeoutMs, agentId?, forwardedProps?, content? }   (text null: start with no
//              messages; content: the user message's content parts instead of text)
// Frontend tools named in frontendResults are executed in onToolCallEndEvent: the script
// POSTs the value to /runs/{runId}/tool-calls/{toolCallId}/result while the stream is open,
// as io.Intelligence frontends do. Output: { events, result, newMessages, messages, posts,
// error } (messages: the agent's whole message list after the run).
import { HttpAgent } from "@ag-ui/client";

const scenario = JSON.parse(process.argv[2]);
const timeoutMs = scenario.timeoutMs ?? 15000;
const events = [];
const posts = [];
const runErrors = [];

const agent = new HttpAgent({
  url: `${scenario.baseUrl}/io-bridge/run`,
  threadId: scenario.threadId,
  initialMessages: scenario.text === null && !scenario.content
    ? []
    : [{ id: `user-${scenario.runId}`, role: "user", content: scenario.content ?? scenario.text }],
});

const subscriber = {
  onEvent({ event }) {
    events.push(event);
  },
  onRunErrorEvent({ event }) {
    runErrors.push(event);
  },
  async onToolCallEndEvent({ event, toolCallName, toolCallArgs }) {
    const results = scenario.frontendResults ?? {};
    if (!(toolCallName in results)) return;
    const url =
      `${scenario.baseUrl}/io-bridge/runs/${encodeURIComponent(scenario.runId)}` +
      `/tool-calls/${encodeURIComponent(event.toolCallId)}/result`;
    const response = await fetch(url, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ result: { ...results[toolCallName], args: toolCallArgs } }),
      signal: AbortSignal.timeout(timeoutMs),
    });
    posts.push({ toolCallId: event.toolCallId, toolCallName, status: response.status,
                 body: await response.json() });
  },
};

const timer = setTimeout(() => {
  console.log(JSON.stringify({ events, posts, error: `timeout after ${timeoutMs} ms` }));
  process.exit(3);
}, timeoutMs);

try {
  const { result, newMessages } = await agent.runAgent(
    {
      runId: scenario.runId,
      tools: scenario.tools ?? [],
      context: [],
      forwardedProps: {
        ...(scenario.forwardedProps ?? {}),
        ...(scenario.agentId ? { agentId: scenario.agentId } : {}),
      },
    },
    subscriber,
  );
  console.log(JSON.stringify({ events, result: result ?? null, newMessages,
                               messages: agent.messages, posts, runErrors, error: null }));
} catch (err) {
  console.log(JSON.stringify({ events, posts, runErrors, error: String(err?.stack ?? err) }));
} finally {
  clearTimeout(timer);
}
