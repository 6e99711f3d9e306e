// An interrupt and its resume with the real @ag-ui/client: one HttpAgent, two runAgent calls.
//
// Usage: node run_interrupt.mjs '<scenario JSON>'
// scenario = { baseUrl, threadId, runIds: [first, second], text, payload, timeoutMs, agentId? }
// The first run is expected to finish with an interrupt outcome; the second answers every
// interrupt it named with { status: "resolved", payload }. Output: { runs: [{ events,
// result, newMessages }], messages, error }.
import { HttpAgent } from "@ag-ui/client";

const scenario = JSON.parse(process.argv[2]);
const timer = setTimeout(() => {
  console.log(JSON.stringify({ error: `timeout after ${scenario.timeoutMs} ms` }));
  process.exit(3);
}, scenario.timeoutMs ?? 15000);

const agent = new HttpAgent({
  url: `${scenario.baseUrl}/io-bridge/run`,
  threadId: scenario.threadId,
  initialMessages: [{ id: `user-${scenario.runIds[0]}`, role: "user", content: scenario.text }],
});

async function run(runId, resume) {
  const events = [];
  const runErrors = [];
  const { result, newMessages } = await agent.runAgent(
    { runId, tools: [], context: [],
      forwardedProps: scenario.agentId ? { agentId: scenario.agentId } : {},
      ...(resume ? { resume } : {}) },
    {
      onEvent({ event }) { events.push(event); },
      onRunErrorEvent({ event }) { runErrors.push(event); },
    },
  );
  return { events, runErrors, result: result ?? null, newMessages };
}

try {
  const first = await run(scenario.runIds[0]);
  const finished = first.events.at(-1);
  const interrupts = finished?.outcome?.interrupts ?? [];
  const resume = interrupts.map((i) => ({
    interruptId: i.id, status: "resolved", payload: scenario.payload,
  }));
  const second = await run(scenario.runIds[1], resume);
  console.log(JSON.stringify({ runs: [first, second], messages: agent.messages, error: null }));
} catch (err) {
  console.log(JSON.stringify({ error: String(err?.stack ?? err) }));
} finally {
  clearTimeout(timer);
}
