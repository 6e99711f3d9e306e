// GET /agents, each agent's capabilities checked with the real @ag-ui/core 1.0 schema.
//
// Usage: node check_agents.mjs '<scenario JSON>'   scenario = { baseUrl }
// Output: { protocolVersions, agents: [{ id, status, valid, issues, capabilities }], error }.
import { AgentCapabilitiesSchema, PROTOCOL_VERSION } from "@ag-ui/core/schemas";

const scenario = JSON.parse(process.argv[2]);
try {
  const response = await fetch(`${scenario.baseUrl}/io-bridge/agents`);
  const body = await response.json();
  const agents = body.agents.map((agent) => {
    const parsed = AgentCapabilitiesSchema.safeParse(agent.capabilities);
    return { id: agent.id, status: agent.status, valid: parsed.success,
             issues: parsed.success ? [] : parsed.error.issues,
             capabilities: parsed.success ? parsed.data : null };
  });
  console.log(JSON.stringify({ clientVersion: PROTOCOL_VERSION,
                               protocolVersions: body.protocolVersions, agents, error: null }));
} catch (err) {
  console.log(JSON.stringify({ error: String(err?.stack ?? err) }));
}
