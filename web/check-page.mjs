// Loads the `assistant` example's page in headless Chromium (Debian's
// `chromium`, driven with puppeteer-core), asks the question, reloads the
// page while the answer streams (the page must reconnect to it), and —
// given the server's pid and command — kills the server with SIGKILL and
// starts it again while the write waits for approval; then approves the
// write, waits for the answer, and prints what the page shows, as JSON,
// for tests/it/assistant_web.rs to check. It also saves a screenshot.
//
//   node check-page.mjs URL SCREENSHOT.png [CHROMIUM [PID COMMAND ARGS...]]
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import puppeteer from 'puppeteer-core';

const [url, screenshot, chromium = 'chromium', pid, ...command] = process.argv.slice(2);
if (!url || !screenshot) {
  console.error('usage: node check-page.mjs URL SCREENSHOT.png [CHROMIUM]');
  process.exit(2);
}

const browser = await puppeteer.launch({
  executablePath: chromium,
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
});
// The server started again, killed when this script ends.
let again;
try {
  const page = await browser.newPage();
  await page.setViewport({ width: 1100, height: 1400 });
  const errors = [];
  page.on('pageerror', error => errors.push(String(error)));
  await page.goto(url, { waitUntil: 'load' });
  await page.click('#send');
  // The answer is under way: reload the page in the middle of it.
  await page.waitForSelector('.tool', { timeout: 60_000 });
  await page.reload({ waitUntil: 'load' });
  // The write waits for the person.
  await page.waitForSelector('button.approve', { timeout: 60_000 });
  const reconnected = await page.evaluate(() => document.body.dataset.reconnected === 'true');
  let restarted = false;
  if (pid && command.length) {
    // The server dies, and comes back over the same run store.
    process.kill(Number(pid), 'SIGKILL');
    again = spawn(command[0], command.slice(1), { stdio: ['ignore', 'pipe', 'inherit'] });
    const lines = createInterface({ input: again.stdout });
    const serving = await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('the server started again did not say where it serves within 60 s')), 60_000);
      lines.once('line', line => {
        clearTimeout(timer);
        resolve(line);
      });
    });
    if (!serving.startsWith('serving on ')) throw new Error(`the server started again said ${serving}`);
    restarted = true;
  }
  const asked = await page.$eval('.tool[data-state="approval-requested"] code.args', el => el.textContent);
  await page.click('button.approve');
  await page.waitForSelector('#finished', { timeout: 60_000 });
  const shown = await page.evaluate(() => ({
    status: document.body.dataset.status,
    texts: [...document.querySelectorAll('.assistant .text')].map(el => el.textContent),
    tools: [...document.querySelectorAll('.tool')].map(el => ({
      name: el.dataset.tool,
      state: el.dataset.state,
      args: el.querySelector('code.args').textContent,
      percent: el.querySelector('.progress')?.dataset.percent ?? null,
      tableRows: el.querySelectorAll('.result tbody tr').length,
      error: el.querySelector('.error-text')?.textContent ?? null,
    })),
    finished: document.querySelector('#finished').textContent,
    redErrors: document.querySelectorAll('.error-text').length,
  }));
  await page.screenshot({ path: screenshot, fullPage: true });
  console.log(JSON.stringify({ ...shown, asked, errors, reconnected, restarted }));
} finally {
  await browser.close();
  if (again) again.kill('SIGKILL');
}
