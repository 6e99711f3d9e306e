// CopilotKit (React, v2 API) talking to its runtime, which has iobridge as an AG-UI agent.
import { CopilotChat, CopilotKitProvider, useFrontendTool, useRenderTool } from "@copilotkit/react-core/v2";
import "@copilotkit/react-core/v2/styles.css";
import { createRoot } from "react-dom/client";
import { z } from "zod";

// Where the CopilotKit runtime is (runtime.mjs) and which thread the page shows, both kept in
// the page's address so that a reload comes back to the same thread.
const params = new URLSearchParams(location.search);
const RUNTIME = params.get("runtime") ?? "http://127.0.0.1:4000/api/copilotkit";
if (!params.has("thread")) {
  params.set("thread", crypto.randomUUID());
  history.replaceState(null, "", `?${params}`);
}
const THREAD_ID = params.get("thread")!;

function Tools() {
  // A frontend tool: declared to the agent in every run, executed here in the browser.
  useFrontendTool({
    name: "get_weather",
    description: "The weather in a city, as the browser knows it.",
    parameters: z.object({ city: z.string() }),
    handler: async ({ city }) => ({ city, sky: "sunny", celsius: 21 }),
    render: ({ args, result }) => (
      <div className="tool" data-tool="get_weather">
        Weather in {args.city}: {result ? `${JSON.parse(result).sky}, ${JSON.parse(result).celsius} °C` : "…"}
      </div>
    ),
  });
  // Tool calls without a UI of their own (iobridge's server tools) show name, arguments, result.
  useRenderTool({
    name: "*",
    render: ({ name, parameters, result }) => (
      <div className="tool" data-tool={name}>
        {name}({JSON.stringify(parameters)}) → {result ?? "…"}
      </div>
    ),
  });
  return null;
}

function App() {
  return (
    <CopilotKitProvider runtimeUrl={RUNTIME} useSingleEndpoint={false}>
      <Tools />
      <CopilotChat threadId={THREAD_ID} />
    </CopilotKitProvider>
  );
}

createRoot(document.getElementById("root")!).render(<App />);
