// Loads the `assistant` example's page in headless Chromium (Debian's
// `chromium`, driven with puppeteer-core), asks the question, approves the
// write it asks about, waits for the answer, and prints what the page
// shows, as JSON, for tests/assistant_web.rs to check. It also saves a
// screenshot.
//
//   node check-page.mjs URL SCREENSHOT.png [CHROMIUM]
import puppeteer from 'puppeteer-core';

const [url, screenshot, chromium = 'chromium'] = process.argv.slice(2);
if (!url || !screenshot) {
  console.error('usage: node check-page.mjs URL SCREENSHOT.png [CHROMIUM]');
  process.exit(2);
}

const browser = await puppeteer.launch({
  executablePath: chromium,
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
});
try {
  const page = await browser.newPage();
  await page.setViewport({ width: 1100, height: 1400 });
  const errors = [];
  page.on('pageerror', error => errors.push(String(error)));
  await page.goto(url, { waitUntil: 'load' });
  await page.click('#send');
  // The write waits for the person: approve it.
  await page.waitForSelector('button.approve', { timeout: 60_000 });
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
  console.log(JSON.stringify({ ...shown, asked, errors }));
} finally {
  await browser.close();
}
