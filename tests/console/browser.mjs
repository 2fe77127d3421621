// The console in a real browser: Debian's Chromium, headless, driven by
// puppeteer-core through the operator's story against a running
// supervisor that tests/tests/console.rs prepared (a question waiting on
// mail 1 of `orders`, mail 2 of `poisoned` dead and its cause cured):
// log in with the token link; see the deployments; answer the question
// and watch the item finish; retry the dead item; recycle `orders` and
// see the new pid without reloading. With SHOTS set, screenshots of the
// main pages go there (docs/console/ in the repository).
//
//   LOGIN_URL=http://127.0.0.1:PORT/login?token=… [SHOTS=DIR] node browser.mjs
import puppeteer from "puppeteer-core";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

const login = process.env.LOGIN_URL;
const shots = process.env.SHOTS;
const chromium = process.env.CHROMIUM || "/usr/bin/chromium";
if (!login) {
  console.error("LOGIN_URL is not set");
  process.exit(2);
}
const origin = new URL(login).origin;
const profile = fs.mkdtempSync(path.join(os.tmpdir(), "wfh-chromium-"));

function step(text) {
  console.log(`browser: ${text}`);
}

async function shot(page, name) {
  if (shots) {
    fs.mkdirSync(shots, { recursive: true });
    await page.screenshot({ path: path.join(shots, `${name}.png`), fullPage: true });
  }
}

// Presses a button as a person would, through the DOM (a mouse click at
// its coordinates can land on whatever the live update just moved there).
async function press(page, selector, timeout = 30000) {
  await Promise.all([
    page.waitForNavigation({ timeout }),
    page.$eval(selector, (b) => b.click()),
  ]);
}

async function text(page, selector) {
  return page.$eval(selector, (e) => e.textContent.trim());
}

const browser = await puppeteer.launch({
  executablePath: chromium,
  headless: true,
  userDataDir: profile,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"],
  defaultViewport: { width: 1200, height: 800 },
});
let failed = false;
try {
  const page = await browser.newPage();
  if (process.env.DEBUG) {
    page.on("response", (r) => step(`${r.status()} ${r.url()}`));
    page.on("request", (r) => step(`asked ${r.method()} ${r.url()}`));
    page.on("requestfailed", (r) => step(`failed ${r.url()} ${r.failure()?.errorText}`));
  }
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("dialog", async (d) => {
    errors.push(`a dialog opened: ${d.message()}`);
    await d.dismiss();
  });

  step("log in with the token link");
  await page.goto(login, { waitUntil: "load" });
  if (new URL(page.url()).pathname !== "/") {
    throw new Error(`the login did not land on the host page: ${page.url()}`);
  }
  const rows = await page.$$eval("tbody tr td:first-child", (tds) => tds.map((t) => t.textContent));
  if (!rows.includes("orders") || !rows.includes("poisoned")) {
    throw new Error(`the host page lists ${JSON.stringify(rows)}`);
  }
  await page.waitForFunction(() => document.getElementById("live")?.textContent === "live", { timeout: 10000 });
  await shot(page, "host");

  step("open mail 1 in a second tab, then answer its question");
  const watch = await browser.newPage();
  watch.on("pageerror", (e) => errors.push(String(e)));
  await watch.goto(`${origin}/mail/1`, { waitUntil: "load" });
  const before = await text(watch, "#mail-state");
  await watch.evaluate(() => {
    window.notReloaded = true;
  });
  step("the questions page");
  await page.goto(`${origin}/questions`, { waitUntil: "load" });
  await shot(page, "questions");
  await page.$eval("textarea[name=value]", (t) => {
    t.value = '{"approved": true}';
  });
  await page.type("input[name=by]", "ana");
  step("answer");
  await press(page, "form.answer button");
  if (!page.url().includes("/confirm")) {
    throw new Error(`the answer did not ask for confirmation: ${page.url()}`);
  }
  const cli = await text(page, ".cli code");
  if (!cli.startsWith("wfhost answer 1 ")) {
    throw new Error(`the confirm page shows ${cli}`);
  }
  await shot(page, "confirm");
  await press(page, "#confirm");
  await page.waitForSelector("#outcome");
  step(`answered; watching mail 1 (was ${before}) finish without a reload`);
  await watch.waitForFunction(
    () => document.getElementById("outcome")?.textContent === "succeeded",
    { timeout: 20000 },
  );
  if (!(await watch.evaluate(() => window.notReloaded === true))) {
    throw new Error("the mail page was reloaded rather than updated");
  }
  await shot(watch, "mail");

  step("retry the dead item");
  await page.goto(`${origin}/dead`, { waitUntil: "load" });
  await shot(page, "dead");
  await press(page, "tbody form button");
  await press(page, "#confirm");
  const retried = await text(page, "#outcome");
  if (retried !== "done") {
    throw new Error(`the retry said ${retried}`);
  }
  await watch.goto(`${origin}/mail/2`, { waitUntil: "load" });
  await watch.waitForFunction(
    () => document.getElementById("outcome")?.textContent === "succeeded",
    { timeout: 20000 },
  );

  step("recycle orders and see the new pid without a reload");
  await watch.goto(`${origin}/d/orders`, { waitUntil: "load" });
  await watch.waitForFunction(() => document.getElementById("live")?.textContent === "live", { timeout: 10000 });
  const oldPid = await text(watch, "#pid");
  await watch.evaluate(() => {
    window.notReloaded = true;
  });
  await shot(watch, "deployment");
  await page.goto(`${origin}/confirm?do=recycle&deployment=orders`, { waitUntil: "load" });
  await press(page, "#confirm");
  await watch.waitForFunction(
    (old) => {
      const pid = document.getElementById("pid")?.textContent;
      return pid && pid !== old && /^[0-9]+$/.test(pid);
    },
    { timeout: 20000 },
    oldPid,
  );
  if (!(await watch.evaluate(() => window.notReloaded === true))) {
    throw new Error("the deployment page was reloaded rather than updated");
  }
  step(`pid ${oldPid} → ${await text(watch, "#pid")}`);

  await page.goto(`${origin}/journal?verify=1`, { waitUntil: "load" });
  await page.waitForSelector("#verdict");
  await shot(page, "journal");
  if (errors.length) {
    throw new Error(`the pages raised: ${errors.join("; ")}`);
  }
  step("done");
} catch (e) {
  failed = true;
  console.error(`browser: FAILED: ${e.stack || e}`);
} finally {
  await browser.close();
  fs.rmSync(profile, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);
