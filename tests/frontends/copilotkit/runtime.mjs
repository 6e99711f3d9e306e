// The CopilotKit runtime (Node), with iobridge registered as its default AG-UI agent.
//   IOBRIDGE_URL=http://127.0.0.1:8000/io-bridge PORT=4000 node runtime.mjs
import { HttpAgent } from "@ag-ui/client";
import { CopilotRuntime } from "@copilotkit/runtime/v2";
import { createCopilotNodeListener } from "@copilotkit/runtime/v2/node";
import { createServer } from "node:http";

const bridge = process.env.IOBRIDGE_URL ?? "http://127.0.0.1:8000/io-bridge";
const runtime = new CopilotRuntime({
  agents: { default: new HttpAgent({ url: `${bridge}/run` }) },
});
const listener = createCopilotNodeListener({
  runtime,
  basePath: "/api/copilotkit",
  cors: true,
  activateChannels: false,
});
const server = createServer(listener);
server.listen(Number(process.env.PORT ?? 4000), "127.0.0.1", () => {
  console.log(JSON.stringify({ port: server.address().port }));
});
