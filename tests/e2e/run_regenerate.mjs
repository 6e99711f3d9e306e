// A stock @ag-ui/client HttpAgent's regenerate: after some turns (whole history each run),
// the agent's last reply is dropped from its messages and the agent is run again, so the
// request holds the stored history up to the last user message and omits the reply.
//
// Usage: node run_regenerate.mjs '<scenario JSON>'
// scenario = { baseUrl, threadId, turns: [{ runId, text }], regenerateRunId, timeoutMs }
// Output: { turns: [{ runId, sent, events }], regenerated: { sent, events, newMessages },
//           messages, error }
import { HttpAgent } from "@ag-ui/client";

const scenario = JSON.parse(process.argv[2]);
const timeoutMs = scenario.timeoutMs ?? 15000;
const turns = [];
const agent = new HttpAgent({ url: `${scenario.baseUrl}/io-bridge/run`, threadId: scenario.threadId });
const timer = setTimeout(() => {
  console.log(JSON.stringify({ turns, error: `timeout after ${timeoutMs} ms` }));
  process.exit(3);
}, timeoutMs);

async function run(runId) {
  const sent = agent.messages.map((m) => m.id);
  const events = [];
  const { newMessages } = await agent.runAgent(
    { runId, tools: [], context: [], forwardedProps: {} },
    { onEvent({ event }) { events.push(event); } },
  );
  return { runId, sent, events, newMessages };
}

try {
  for (const turn of scenario.turns) {
    agent.addMessage({ id: `user-${turn.runId}`, role: "user", content: turn.text });
    turns.push(await run(turn.runId));
  }
  const last = agent.messages[agent.messages.length - 1];
  if (last?.role !== "assistant") throw new Error(`the last message is ${last?.role}`);
  agent.setMessages(agent.messages.slice(0, -1));
  const regenerated = await run(scenario.regenerateRunId);
  console.log(JSON.stringify({ turns, regenerated, messages: agent.messages, error: null }));
} catch (err) {
  console.log(JSON.stringify({ turns, error: String(err?.stack ?? err) }));
} finally {
  clearTimeout(timer);
}
