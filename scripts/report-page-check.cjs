// Opens a run report page in real headless Chromium (Debian's `chromium`, driven by
// playwright-core) and prints what a test needs to judge it, as one JSON object on stdout:
// console errors, page errors, requests that left the file (there must be none), each GPU
// chart's series with their drawn bounding boxes, the summary's energy cell, the page's
// background in light and in dark mode; and saves screenshots (light: the top of the page
// and the full page; dark: the top).
//
// Usage: node scripts/report-page-check.cjs PAGE.html OUT_DIR
// Env:   GPU_OTEL_SIDECAR_TEST_PLAYWRIGHT  path of the playwright-core package
//        GPU_OTEL_SIDECAR_TEST_CHROMIUM    the browser (default /usr/bin/chromium)
// Called by tests/report/page.rs (report_page_in_chromium), which scripts/check-report-page.sh runs.
'use strict';
const path = require('path');
const fs = require('fs');
const os = require('os');

const [page_path, out_dir] = process.argv.slice(2);
if (!page_path || !out_dir) {
  console.error('usage: node scripts/report-page-check.cjs PAGE.html OUT_DIR');
  process.exit(2);
}
const { chromium } = require(process.env.GPU_OTEL_SIDECAR_TEST_PLAYWRIGHT || 'playwright-core');

(async () => {
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'report-page-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.GPU_OTEL_SIDECAR_TEST_CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--no-first-run'],
    viewport: { width: 1200, height: 1400 },
    colorScheme: 'light',
  });
  const out = { console_errors: [], page_errors: [], requests: [] };
  const page = context.pages()[0] || await context.newPage();
  page.on('console', (m) => { if (m.type() === 'error') out.console_errors.push(m.text()); });
  page.on('pageerror', (e) => out.page_errors.push(String(e)));
  page.on('request', (r) => { if (!r.url().startsWith('file:')) out.requests.push(r.url()); });
  await page.goto('file://' + path.resolve(page_path), { waitUntil: 'load' });

  const look = () => page.evaluate(() => {
    const charts = [...document.querySelectorAll('figure.gpu-chart')].map((f) => ({
      uuid: f.dataset.gpuUuid,
      series_count: Number(f.dataset.seriesCount),
      svg_width: f.querySelector('svg').getBoundingClientRect().width,
      series: [...f.querySelectorAll('path.series')].map((p) => {
        const b = p.getBBox();
        return { key: p.dataset.series, x: b.x, width: b.width, height: b.height,
          length: p.getTotalLength(), stroke: getComputedStyle(p).stroke };
      }),
      markers: [...f.querySelectorAll('g.marker')].reduce((n, g) => n + Number(g.dataset.events), 0),
    }));
    const cell = document.querySelector('td[data-figure="energy_j"][data-scope="pod"]');
    return {
      title: document.title,
      charts,
      energy: cell && { value: cell.dataset.value, text: cell.textContent,
        visible: cell.getBoundingClientRect().width > 0 },
      events: document.querySelectorAll('tr.event').length,
      background: getComputedStyle(document.body).backgroundColor,
    };
  });
  out.light = await look();
  fs.mkdirSync(out_dir, { recursive: true });
  await page.screenshot({ path: path.join(out_dir, 'light.png') });
  await page.screenshot({ path: path.join(out_dir, 'light-full.png'), fullPage: true });
  await page.emulateMedia({ colorScheme: 'dark' });
  out.dark = await look();
  await page.screenshot({ path: path.join(out_dir, 'dark.png') });
  await context.close();
  fs.rmSync(profile, { recursive: true, force: true });
  process.stdout.write(JSON.stringify(out) + '\n');
})().catch((e) => {
  console.error(String(e && e.stack || e));
  process.exit(1);
});
