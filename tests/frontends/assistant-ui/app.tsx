// assistant-ui with its AG-UI adapter, talking to iobridge directly from the browser.
import { HttpAgent } from "@ag-ui/client";
import {
  AssistantRuntimeProvider,
  AttachmentPrimitive,
  AuiConfig,
  AuiIf,
  ComposerPrimitive,
  ExportedMessageRepository,
  MessagePrimitive,
  SimpleImageAttachmentAdapter,
  ThreadPrimitive,
  Tools,
  defineToolkit,
} from "@assistant-ui/react";
import { fromAgUiMessages, useAgUiRuntime } from "@assistant-ui/react-ag-ui";
import { useMemo } from "react";
import { createRoot } from "react-dom/client";

// Where iobridge is (its prefix included) and which thread the page shows, both kept in the
// page's address so that a reload comes back to the same thread.
const params = new URLSearchParams(location.search);
const BRIDGE = params.get("bridge") ?? "http://127.0.0.1:8000/io-bridge";
if (!params.has("thread")) {
  params.set("thread", crypto.randomUUID());
  history.replaceState(null, "", `?${params}`);
}
const THREAD_ID = params.get("thread")!;

// A frontend tool: declared to the agent in every run, executed here in the browser.
const toolkit = defineToolkit({
  get_weather: {
    type: "frontend",
    description: "The weather in a city, as the browser knows it.",
    parameters: {
      type: "object",
      properties: { city: { type: "string" } },
      required: ["city"],
    },
    execute: async ({ city }: { city: string }) => ({ city, sky: "sunny", celsius: 21 }),
    render: ({ args, result }) => (
      <div className="tool" data-tool="get_weather">
        Weather in {args.city}: {result ? `${result.sky}, ${result.celsius} °C` : "…"}
      </div>
    ),
  },
});

// iobridge stores every run's messages; the page only reads the thread back when it loads.
const threadHistory = {
  async load() {
    const url = `${BRIDGE}/threads/${encodeURIComponent(THREAD_ID)}/messages?format=agui&limit=1000`;
    const response = await fetch(url);
    if (response.status === 404) return { messages: [] }; // a new thread
    if (!response.ok) throw new Error(`loading the thread: HTTP ${response.status}`);
    const { messages } = await response.json();
    return ExportedMessageRepository.fromArray(fromAgUiMessages(messages));
  },
  async append() {},
};

// Tool calls without a UI of their own (iobridge's server tools) show name, arguments, result.
function ToolCall({ toolName, args, result }: { toolName: string; args: unknown; result?: unknown }) {
  return (
    <div className="tool" data-tool={toolName}>
      {toolName}({JSON.stringify(args)}) → {result === undefined ? "…" : JSON.stringify(result)}
    </div>
  );
}

// An attached image, in the composer before sending and in the user's message after.
function Attachment() {
  return (
    <AttachmentPrimitive.Root className="attachment">
      <AttachmentPrimitive.Name />
    </AttachmentPrimitive.Root>
  );
}

function UserMessage() {
  return (
    <MessagePrimitive.Root className="message user">
      <MessagePrimitive.Attachments components={{ Attachment }} />
      <MessagePrimitive.Parts />
    </MessagePrimitive.Root>
  );
}

function AssistantMessage() {
  return (
    <MessagePrimitive.Root className="message assistant">
      <MessagePrimitive.Parts components={{ tools: { Fallback: ToolCall } }} />
    </MessagePrimitive.Root>
  );
}

function Chat() {
  return (
    <ThreadPrimitive.Root className="thread">
      <ThreadPrimitive.Viewport className="messages">
        <ThreadPrimitive.Messages components={{ UserMessage, AssistantMessage }} />
      </ThreadPrimitive.Viewport>
      <ComposerPrimitive.Root className="composer">
        <ComposerPrimitive.Attachments components={{ Attachment }} />
        <ComposerPrimitive.AddAttachment>Attach</ComposerPrimitive.AddAttachment>
        <ComposerPrimitive.Input placeholder="Message" />
        <AuiIf condition={(s) => !s.thread.isRunning}>
          <ComposerPrimitive.Send>Send</ComposerPrimitive.Send>
        </AuiIf>
        <AuiIf condition={(s) => s.thread.isRunning}>
          <ComposerPrimitive.Cancel>Stop</ComposerPrimitive.Cancel>
        </AuiIf>
      </ComposerPrimitive.Root>
    </ThreadPrimitive.Root>
  );
}

function App() {
  const agent = useMemo(() => new HttpAgent({ url: `${BRIDGE}/run`, threadId: THREAD_ID }), []);
  // Images go to the agent as AG-UI 1.0 image parts (inline base64 data).
  const attachments = useMemo(() => new SimpleImageAttachmentAdapter(), []);
  const runtime = useAgUiRuntime({ agent, adapters: { history: threadHistory, attachments } });
  return (
    <AssistantRuntimeProvider runtime={runtime} config={AuiConfig({ tools: Tools({ toolkit }) })}>
      <Chat />
    </AssistantRuntimeProvider>
  );
}

createRoot(document.getElementById("root")!).render(<App />);
