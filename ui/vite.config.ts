/// <reference types="vitest" />
import { defineConfig } from "vite";
import react from "@vitejs/plugin-react";
import type { Plugin } from "vite";
import { TOKEN_KEY } from "./src/api/session";

const BASE = "/ui/";

// elkjs' worker started by index.html itself, before the app's script is fetched and run:
// parsing its 1.6 MB takes the worker a few hundred ms, and started by the app it was
// still at it when a run's graph came (layout.ts adopts this worker, `adopt`)
function earlyElkWorker(): Plugin {
  return {
    name: "early-elk-worker",
    apply: "build",
    transformIndexHtml: {
      order: "post",
      handler(_html, { bundle }) {
        const file = Object.keys(bundle ?? {}).find((f) => /elk-worker\.min.*\.js$/.test(f));
        if (!file) return [];
        // signed in only (the app's token): the sign-in page needs no layout
        const code = `try{if(sessionStorage.getItem(${JSON.stringify(TOKEN_KEY)}))self.__milepostElk=new Worker("${BASE}${file}")}catch(e){}`;
        return [{ tag: "script", children: code, injectTo: "head-prepend" }];
      },
    },
  };
}

// The build goes inside the Python package, so `milepost server` serves it at /ui/ and a
// wheel carries it. `npm run dev` proxies /api to a running server (MILEPOST_URL).
const api = process.env.MILEPOST_URL ?? "http://127.0.0.1:8082";

export default defineConfig({
  base: BASE,
  plugins: [react(), earlyElkWorker()],
  build: {
    outDir: "../milepost/web/dist",
    emptyOutDir: true,
    chunkSizeWarningLimit: 2000,
  },
  server: { proxy: { "/api": { target: api, changeOrigin: true } } },
  test: {
    environment: "jsdom",
    include: ["src/**/*.test.{ts,tsx}"],
    setupFiles: ["src/test-setup.ts"],
  },
});
