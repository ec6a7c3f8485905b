// ESLint (flat config) with typescript-eslint's recommended rules, run by run_tests.sh.
import js from "@eslint/js";
import tseslint from "typescript-eslint";

export default tseslint.config(
  { ignores: ["dist/", "build/", "node_modules/"] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: { globals: { process: "readonly", console: "readonly", URL: "readonly", Buffer: "readonly", setTimeout: "readonly", clearTimeout: "readonly", performance: "readonly", AbortController: "readonly", AbortSignal: "readonly" } },
  },
);
