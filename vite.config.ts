import { defineConfig } from 'vitest/config';
import { svelte } from '@sveltejs/vite-plugin-svelte';

// Tauri expects a fixed port in development and serves `build/web/` in builds (`dist/` holds
// the packages of scripts/package.sh).
const host = process.env.TAURI_DEV_HOST;

export default defineConfig({
  plugins: [svelte()],
  clearScreen: false,
  server: {
    port: 1420,
    strictPort: true,
    host: host || false,
    hmr: host ? { protocol: 'ws', host, port: 1421 } : undefined,
    watch: { ignored: ['**/src-tauri/**', '**/crates/**', '**/target/**'] },
  },
  envPrefix: ['VITE_', 'TAURI_ENV_'],
  build: {
    outDir: 'build/web',
    emptyOutDir: true,
    // WebKitGTK 2.4x and WebView2 both run ES2021.
    target: 'es2021',
    minify: !process.env.TAURI_ENV_DEBUG,
    sourcemap: !!process.env.TAURI_ENV_DEBUG,
  },
  resolve: process.env.VITEST ? { conditions: ['browser'] } : undefined,
  test: {
    environment: 'jsdom',
    globals: true,
    include: ['src/**/*.test.ts'],
    setupFiles: ['src/test-setup.ts'],
    // Every test, hook and teardown has a deadline (vitest's defaults, stated): a hang
    // fails the test by name in seconds (issue 26).
    testTimeout: 5_000,
    hookTimeout: 10_000,
    teardownTimeout: 10_000,
  },
});
