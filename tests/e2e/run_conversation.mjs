// Drive several runs on one thread with ONE @ag-ui/client HttpAgent, in its default mode:
// every run sends the agent's whole message history (what it received so far plus the new
// user message), as a stock AG-UI frontend does.
//
// Usage: node run_conversation.mjs '<scenario JSON>'
// scenario = { baseUrl, threadId, turns: [{ runId, text }], agentId, timeoutMs }
// Output: { turns: [{ runId, sent, newMessages, events }], messages, error }
//   sent: the ids of the messages the client sent in that run's RunAgentInput.
import { HttpAgent } from "@ag-ui/client";

const scenario = JSON.parse(process.argv[2]);
const timeoutMs = scenario.timeoutMs ?? 15000;
const turns = [];

const agent = new HttpAgent({
  url: `${scenario.baseUrl}/io-bridge/run`,
  threadId: scenario.threadId,
});

const timer = setTimeout(() => {
  console.log(JSON.stringify({ turns, error: `timeout after ${timeoutMs} ms` }));
  process.exit(3);
}, timeoutMs);

try {
  for (const turn of scenario.turns) {
    agent.addMessage({ id: `user-${turn.runId}`, role: "user", content: turn.text });
    const sent = agent.messages.map((m) => m.id);
    const events = [];
    const { newMessages } = await agent.runAgent(
      {
        runId: turn.runId,
        tools: [],
        context: [],
        forwardedProps: scenario.agentId ? { agentId: scenario.agentId } : {},
      },
      { onEvent({ event }) { events.push(event); } },
    );
    turns.push({ runId: turn.runId, sent, newMessages, events });
  }
  console.log(JSON.stringify({ turns, messages: agent.messages, error: null }));
} catch (err) {
  console.log(JSON.stringify({ turns, error: String(err?.stack ?? err) }));
} finally {
  clearTimeout(timer);
}
