// A multi-step tool run with the Vercel AI SDK's default `openai()` provider (the Responses API,
// `store` on: earlier assistant text goes back as `item_reference`s), against the gateway named by
// OPENAI_BASE_URL. Run by test_stateful_sdks.py; the pinned packages are imported from the
// node_modules folder HARNESS_MODULES names (deploy/install.sh installs them into .harness).
// Prints the result as JSON.
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const from = (pkg) => import(pathToFileURL(join(process.env.HARNESS_MODULES, pkg, "dist/index.js")));
const { openai } = await from("@ai-sdk/openai");
const { generateText, jsonSchema, stepCountIs, tool } = await from("ai");

const weather = tool({
  description: "Weather in a city",
  inputSchema: jsonSchema({
    type: "object",
    properties: { city: { type: "string" } },
    required: ["city"],
  }),
  execute: async ({ city }) => ({ city, forecast: "sunny" }),
});

const result = await generateText({
  model: openai(process.env.MODEL ?? "smol"),
  tools: { get_weather: weather },
  stopWhen: stepCountIs(3),
  prompt: "What is the weather in Paris?",
});
console.log(
  JSON.stringify({
    text: result.text,
    steps: result.steps.map((s) => ({
      text: s.text,
      toolCalls: s.toolCalls.map((c) => c.toolName),
      finishReason: s.finishReason,
    })),
  }),
);
