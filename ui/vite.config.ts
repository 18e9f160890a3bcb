/// <reference types="vitest" />
import { defineConfig } from "vite";
import react from "@vitejs/plugin-react";

// The build goes inside the Python package, so `milepost server` serves it at /ui/ and a
// wheel carries it. `npm run dev` proxies /api to a running server (MILEPOST_URL).
const api = process.env.MILEPOST_URL ?? "http://127.0.0.1:8082";

export default defineConfig({
  base: "/ui/",
  plugins: [react()],
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
