// The panel's browser suite: Debian's chromium, headless, driven by
// playwright-core against a running relay (the demo of deploy/demo/run.sh,
// started by browser_test.go, which passes everything below in FLEET_*
// variables). Each step prints "ok" or "not ok" with its name; the last line
// is "N passed, M failed", and the exit status is 1 when any failed.
import { chromium } from "playwright-core";
import { execFileSync } from "node:child_process";
import { mkdtempSync, mkdirSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";

const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set (browser_test.go sets it)`);
  return v;
};
const BASE = env("FLEET_BASE");
const API = BASE + "/api/v1/public";
const OWNER = { email: env("FLEET_OWNER_EMAIL"), password: env("FLEET_OWNER_PASSWORD") };
const VIEWER = { email: env("FLEET_VIEWER_EMAIL"), password: env("FLEET_VIEWER_PASSWORD") };
const ACCOUNTS = { email: env("FLEET_ACCOUNTS_EMAIL"), password: env("FLEET_ACCOUNTS_PASSWORD") }; // [accounts]: in two organizations
const KEY = env("FLEET_API_KEY");
const DEVICE = env("FLEET_DEVICE"); // an ONLINE IG-500 with configured channels
const OFFLINE = env("FLEET_OFFLINE_DEVICE"); // its agent was stopped: a device_offline alert opens
const XSS_NAME = env("FLEET_XSS_NAME");
const SHOTS = env("FLEET_SCREENSHOTS");
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
const ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run"];

mkdirSync(SHOTS, { recursive: true });
const profiles = [];

async function browserContext() {
  const dir = mkdtempSync(join(tmpdir(), "fleet-chromium-"));
  profiles.push(dir);
  const ctx = await chromium.launchPersistentContext(dir, {
    executablePath: CHROMIUM, headless: true, args: ARGS, viewport: { width: 1280, height: 800 }, timeout: 60_000,
  });
  ctx.setDefaultTimeout(15_000);
  return ctx;
}

function assert(cond, msg) {
  if (!cond) throw new Error(msg);
}

// shoot saves the page at desktop width and at 360 px.
async function shoot(page, name) {
  for (const [w, suffix] of [[1280, "desktop"], [360, "360"]]) {
    await page.setViewportSize({ width: w, height: 800 });
    await page.waitForTimeout(400); // charts redraw after a resize
    await page.screenshot({ path: join(SHOTS, `${name}-${suffix}.png`), fullPage: true });
  }
  await page.setViewportSize({ width: 1280, height: 800 });
}

// curl calls the public API with a key over real HTTP and returns
// [status, body].
function curl(key, path) {
  const out = execFileSync("curl", ["-sS", "--max-time", "10", "-w", "\n%{http_code}", "-H", `Authorization: Bearer ${key}`, API + path], { encoding: "utf8" });
  const i = out.lastIndexOf("\n");
  return [Number(out.slice(i + 1)), out.slice(0, i)];
}

async function signIn(page, who) {
  await page.goto(BASE + "/panel/login");
  await page.getByLabel("Email").fill(who.email);
  await page.getByLabel("Password").fill(who.password);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.waitForURL(BASE + "/panel/");
}

async function until(what, fn, ms = 60_000) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

const steps = [];
const step = (name, fn) => steps.push({ name, fn });

let owner, page;

step("sign-in refuses a wrong password", async () => {
  owner = await browserContext();
  page = owner.pages()[0] || (await owner.newPage());
  await page.goto(BASE + "/panel/");
  assert(page.url().startsWith(BASE + "/panel/login"), `signed out, /panel/ went to ${page.url()}`);
  await shoot(page, "login");
  await page.getByLabel("Email").fill(OWNER.email);
  await page.getByLabel("Password").fill("not the password");
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByText("Wrong email or password.").waitFor();
  assert(page.url().startsWith(BASE + "/panel/login"), "a wrong password left the sign-in page");
});

step("sign-in with the right password lands on the fleet", async () => {
  await page.getByLabel("Password").fill(OWNER.password);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.waitForURL(BASE + "/panel/");
  await page.getByRole("heading", { name: "Fleet" }).waitFor();
});

step("the fleet page shows the demo devices", async () => {
  for (const name of ["Press line 1", "Packaging line", "Gatehouse"]) {
    await page.getByRole("link", { name, exact: true }).waitFor();
  }
  await shoot(page, "fleet");
});

step("a device named like markup renders as text", async () => {
  await page.getByRole("link", { name: XSS_NAME, exact: true }).waitFor();
  const imgs = await page.locator("table.devices img").count();
  const fired = await page.evaluate(() => window.__xss);
  assert(imgs === 0, `${imgs} <img> elements in the device table`);
  assert(fired === undefined, "the device name's onerror ran");
  await page.getByRole("link", { name: XSS_NAME, exact: true }).click();
  await page.getByRole("heading", { level: 1 }).filter({ hasText: XSS_NAME }).waitFor();
  assert((await page.evaluate(() => window.__xss)) === undefined, "the device page ran the name's onerror");
});

step("a device page's charts hold data points", async () => {
  // The demo's agents send metrics every 30 s: wait for the first.
  await until("the device's first metric samples", async () => {
    await page.goto(`${BASE}/panel/devices/${DEVICE}?range=1h`);
    await page.locator(".chart[data-points]").nth(4).waitFor();
    return Number(await page.locator('.chart[data-series="cpuPct"]').getAttribute("data-points")) > 0;
  }, 90_000);
  assert((await page.locator(".chart[data-series]").count()) === 5, "want five charts");
  for (const series of ["cpuPct", "memPct", "diskUsedPct", "tempCpu", "loadAvg1"]) {
    // [charts] a host without a thermal sensor (many CI machines) says so
    // instead of drawing 0 °C; the [charts] steps check it on a host of their own.
    if (series === "tempCpu" && (await page.locator('.chart[data-series="tempCpu"][data-no-sensor="true"]').count()) === 1) continue;
    const n = Number(await page.locator(`.chart[data-series="${series}"]`).getAttribute("data-points"));
    assert(n >= 1, `chart ${series} holds ${n} points`);
    assert((await page.locator(`.chart[data-series="${series}"] canvas`).count()) === 1, `chart ${series} drew no canvas`);
  }
  await shoot(page, "device");
});

step("channels refresh by themselves", async () => {
  const live = page.locator("#channels tr", { hasText: "rs485-1" }).locator("code.live");
  const first = await live.textContent();
  await page.waitForResponse((r) => r.url().endsWith(`/panel/devices/${DEVICE}/channels`) && r.status() === 200, { timeout: 10_000 });
  await until("rs485-1's live value to change on the page", async () => {
    const now = await page.locator("#channels tr", { hasText: "rs485-1" }).locator("code.live").textContent();
    return now !== first;
  }, 20_000);
});

// The demo's IG-500s read points on rs485-1 (deploy/demo/run.sh): a
// temperature and a counter that moves every second.
const COUNTER = "rs485-1.pulse_count";
const pointRow = (p, id) => p.locator(`#points tr[data-point-id="${id}"]`);

step("points are listed and refresh by themselves", async () => {
  await page.goto(`${BASE}/panel/devices/${DEVICE}`);
  const value = pointRow(page, COUNTER).locator(".value");
  const first = await until(`${COUNTER}'s first reading`, async () => {
    const v = (await value.textContent()).trim();
    return v !== "—" ? v : null;
  }, 60_000);
  const row = await pointRow(page, COUNTER).textContent();
  assert(/good/.test(row) && /(\d+ s ago|now)/.test(row), `${COUNTER}'s row: ${row}`);
  await page.evaluate(() => { window.__notReloaded = true; });
  await page.waitForResponse((r) => r.url().endsWith(`/panel/devices/${DEVICE}/points`) && r.status() === 200, { timeout: 10_000 });
  await until(`${COUNTER}'s value to change on the page`, async () => (await value.textContent()).trim() !== first, 30_000);
  assert(await page.evaluate(() => window.__notReloaded === true), "the page was reloaded to show the new value");
});

step("a point's chart draws its buckets, switches ranges and downloads CSV", async () => {
  await pointRow(page, COUNTER).getByRole("link").click();
  await page.waitForURL(`${BASE}/panel/devices/${DEVICE}/points/${COUNTER}`);
  await page.getByRole("heading", { level: 1, name: COUNTER }).waitFor();
  const chart = page.locator(".point-chart");
  await until("the chart's first bucket", async () => {
    await page.reload();
    await chart.locator("canvas").waitFor();
    return Number(await chart.getAttribute("data-points")) > 0;
  }, 90_000);
  for (const [label, range] of [["Last 1 h", "1h"], ["Last 7 d", "7d"], ["Last 24 h", "24h"]]) {
    await page.getByRole("link", { name: label, exact: true }).click();
    await page.waitForURL((u) => u.searchParams.get("range") === range);
    assert((await page.getByRole("link", { name: label, exact: true }).getAttribute("aria-current")) === "true", `${label} is not marked current`);
    await chart.locator("canvas").waitFor();
    assert(Number(await chart.getAttribute("data-points")) > 0, `range ${range}: no bucket drawn`);
  }
  await shoot(page, "point");
  for (const [name, header] of [[/^Download CSV: .*, the last 24 h in 2 min buckets$/, "at,min,max,avg,last,count"], [/^Raw samples \(CSV\): .*, the last 24 h$/, "at,value"]]) {
    const [download] = await Promise.all([page.waitForEvent("download"), page.getByRole("link", { name }).click()]);
    const text = readFileSync(await download.path(), "utf8");
    const lines = text.trim().split("\n");
    assert(lines[0] === header, `${name}: header ${JSON.stringify(lines[0])}`);
    assert(lines.length >= 2, `${name}: no rows`);
    assert(download.suggestedFilename().startsWith(COUNTER) && download.suggestedFilename().endsWith(".csv"), `${name}: file ${download.suggestedFilename()}`);
  }
});

step("at 360 px the device and point pages do not scroll sideways and the chart fits", async () => {
  await page.setViewportSize({ width: 360, height: 800 });
  for (const path of [`/panel/devices/${DEVICE}`, `/panel/devices/${DEVICE}/points/${COUNTER}?range=1h`]) {
    await page.goto(BASE + path);
    await page.waitForTimeout(300);
    const [scroll, client] = await page.evaluate(() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]);
    assert(scroll <= client, `${path} at 360 px: ${scroll} px wide in ${client}`);
  }
  const box = await page.locator(".point-chart canvas").boundingBox();
  assert(box && box.x >= 0 && box.x + box.width <= 360, `the chart at 360 px: ${JSON.stringify(box)}`);
  await page.setViewportSize({ width: 1280, height: 800 });
  await page.waitForTimeout(300); // the chart grows back after a resize
  const wide = await page.locator(".point-chart canvas").boundingBox();
  assert(wide.width > box.width, `the chart did not resize: ${box.width} then ${wide.width} px`);
});

step("the keyboard reaches a point's chart and its ranges, with visible focus", async () => {
  await page.goto(`${BASE}/panel/devices/${DEVICE}`);
  const target = `point-${COUNTER}`;
  let tabs = 0;
  for (; tabs < 150; tabs++) {
    await page.keyboard.press("Tab");
    if ((await page.evaluate(() => document.activeElement && document.activeElement.id)) === target) break;
  }
  assert(tabs < 150, `${target} not reached in 150 Tab presses`);
  const outline = await page.evaluate(() => getComputedStyle(document.activeElement).outlineStyle);
  assert(outline !== "none", "the focused point link shows no focus outline");
  // A refresh of the list keeps the focus on the same link.
  await page.waitForResponse((r) => r.url().endsWith(`/panel/devices/${DEVICE}/points`), { timeout: 10_000 });
  await page.waitForTimeout(200);
  assert((await page.evaluate(() => document.activeElement && document.activeElement.id)) === target, "the points refresh lost the focus");
  await page.keyboard.press("Enter");
  await page.waitForURL(`${BASE}/panel/devices/${DEVICE}/points/${COUNTER}`);
  for (let i = 0; i < 40; i++) {
    await page.keyboard.press("Tab");
    if ((await page.evaluate(() => document.activeElement && document.activeElement.getAttribute("aria-label"))) === "Last 1 h") break;
  }
  assert((await page.evaluate(() => document.activeElement.getAttribute("aria-label"))) === "Last 1 h", "the 1 h range is not reachable by Tab");
  await page.keyboard.press("Enter");
  await page.waitForURL((u) => u.searchParams.get("range") === "1h");
});

step("a DBC file imported on a CAN FD channel's page becomes its points; a malformed one names its line", async () => {
  const dbc = (extra) => ({ name: "browser.dbc", mimeType: "application/octet-stream", buffer: Buffer.from(
    `VERSION ""\n\nNS_ :\n\nBS_:\n\nBU_: ECU\n\nBO_ 1280 BrowserFrame: 8 ECU\n SG_ BrowserLevel : 0|8@1+ (0.5,0) [0|127.5] "%" ECU\n${extra}`) });
  await page.goto(`${BASE}/panel/devices/${DEVICE}`);
  const form = page.locator("#config-canfd-1");
  await form.locator("summary").click();
  await form.getByLabel("DBC file", { exact: true }).setInputFiles(dbc("BO_ 1281 Broken: eight ECU\n"));
  await form.getByRole("button", { name: "Import DBC into canfd-1" }).click();
  await page.getByText("browser.dbc:11:").waitFor();
  await page.goto(`${BASE}/panel/devices/${DEVICE}`);
  assert((await pointRow(page, "canfd-1.browser_level").count()) === 0, "the malformed file added a point");
  await page.locator("#config-canfd-1 summary").click();
  await page.locator("#config-canfd-1").getByLabel("DBC file", { exact: true }).setInputFiles(dbc(""));
  await page.locator("#config-canfd-1").getByLabel("Messages (optional)").fill("BrowserFrame");
  await page.getByRole("button", { name: "Import DBC into canfd-1" }).click();
  await page.getByText("DBC file imported: canfd-1 now has").waitFor();
  await pointRow(page, "canfd-1.browser_level").waitFor();
  const [status, body] = curl(KEY, `/devices/${DEVICE}/serial/channels/canfd-1`);
  const pt = JSON.parse(body).data.config.points.find((p) => p.name === "browser_level");
  assert(status === 200 && pt && pt.canId === "0x500" && pt.scale === 0.5 && pt.unit === "%", `canfd-1's point through the API: ${JSON.stringify(pt)}`);
});

step("acknowledging an alert changes its state in the API", async () => {
  const row = await until("the Gatehouse's device_offline alert on the alerts page", async () => {
    await page.goto(BASE + "/panel/alerts");
    const r = page.locator("tr[data-alert-id]", { hasText: "Gatehouse" });
    return (await r.count()) > 0 ? r.first() : null;
  }, 90_000);
  const id = await row.getAttribute("data-alert-id");
  await shoot(page, "alerts");
  await row.getByRole("button", { name: "Acknowledge" }).click();
  await page.getByText("1 alert acknowledged.").waitFor();
  const [status, body] = curl(KEY, "/alerts?state=ACKNOWLEDGED&limit=100");
  assert(status === 200, `GET /alerts: ${status}`);
  const a = JSON.parse(body).data.find((x) => x.id === id);
  assert(a && a.state === "ACKNOWLEDGED" && a.deviceId === OFFLINE, `alert ${id} through the API: ${JSON.stringify(a)}`);
});

let newKey;
step("a new key is shown once and works with curl with exactly its scopes", async () => {
  await page.goto(BASE + "/panel/settings/api-keys");
  await page.getByLabel("Name").fill("Browser test key");
  await page.getByLabel("devices:read", { exact: true }).check();
  await page.getByLabel("Expires").selectOption({ label: "7 days" });
  await page.getByRole("button", { name: "Create key" }).click();
  newKey = await page.locator("#new-key").inputValue();
  assert(/^svc_sk_\w+$/.test(newKey), `created key ${newKey}`);
  await page.getByText("shown only this once").waitFor();
  await shoot(page, "api-keys");
  let [status] = curl(newKey, "/devices");
  assert(status === 200, `GET /devices with devices:read: ${status}`);
  let body;
  [status, body] = curl(newKey, "/alerts");
  assert(status === 403 && JSON.parse(body).error.code === "insufficient_scope", `GET /alerts without alerts:read: ${status} ${body}`);
  [status] = curl(newKey, `/devices/${DEVICE}/metrics`);
  assert(status === 403, `GET metrics without metrics:read: ${status}`);
  await page.goto(BASE + "/panel/settings/api-keys");
  assert(!(await page.content()).includes(newKey), "the key is shown again after a reload");
  const row = page.locator("tr", { hasText: "Browser test key" });
  await until("the key's last use in the list", async () => {
    await page.reload();
    return (await row.locator("td.last-used").textContent()).trim() !== "never";
  }, 15_000);
});

step("a revoked key gets 401 on its next request", async () => {
  const row = page.locator("tr", { hasText: "Browser test key" });
  await row.getByRole("button", { name: "Revoke" }).click();
  await page.getByRole("heading", { name: /Revoke the API key/ }).waitFor();
  await shoot(page, "revoke-confirm");
  let [status] = curl(newKey, "/devices");
  assert(status === 200, `before the confirmation: ${status}`);
  await page.getByRole("button", { name: "Revoke key" }).click();
  await page.getByText("revoked.").first().waitFor();
  [status] = curl(newKey, "/devices");
  assert(status === 401, `after revoke: ${status}`);
});

step("webhooks and members pages", async () => {
  await page.goto(BASE + "/panel/settings/webhooks");
  await page.getByLabel("Alert webhook URL").waitFor();
  await shoot(page, "webhooks");
  await page.goto(BASE + "/panel/settings/members");
  await page.getByRole("cell", { name: OWNER.email }).first().waitFor();
  await shoot(page, "members");
});

step("an alert's page shows its device and rule, linked from the alerts list", async () => {
  await page.goto(BASE + "/panel/alerts?state=ACKNOWLEDGED");
  const row = page.locator("tr[data-alert-id]", { hasText: "Gatehouse" }).first();
  const id = await row.getAttribute("data-alert-id");
  await row.getByRole("link", { name: /./ }).first().click();
  await page.waitForURL(`${BASE}/panel/alerts/${id}`);
  await page.locator(".alert-details").getByRole("link", { name: "Gatehouse" }).waitFor();
  await page.locator(".alert-details").getByRole("link", { name: "device_offline" }).waitFor();
  assert((await page.locator(".alert-details .state").textContent()).trim() === "ACKNOWLEDGED", "the alert's page does not say ACKNOWLEDGED");
});

// Alerts → Rules, Settings → Notifications, Silences (issue 27).
const CHANNEL = "Browser mail";
const RULE = "Browser counter";

step("a notification channel added in Settings → Notifications is listed", async () => {
  await page.goto(BASE + "/panel/settings/notifications");
  await page.getByLabel("Name").fill(CHANNEL);
  await page.getByLabel("Kind").selectOption("email");
  await page.getByLabel("Target").fill("ops@demo.example");
  await page.getByLabel("Minimum severity").selectOption("WARNING");
  await page.getByRole("button", { name: "Add channel" }).click();
  await page.getByText(`Channel “${CHANNEL}” added.`).waitFor();
  const row = page.locator("tr[data-channel-id]", { hasText: CHANNEL });
  assert((await row.textContent()).includes("ops@demo.example"), "the channel's row has no target");
  await shoot(page, "notifications");
});

step("a rule on a point is previewed before it is saved, then saved and in the API", async () => {
  await page.goto(BASE + "/panel/alerts/rules");
  await page.getByRole("link", { name: "New rule" }).click();
  await page.waitForURL(BASE + "/panel/alerts/rules/new");
  await page.getByLabel("Name").fill(RULE);
  await page.getByLabel("Severity").selectOption("WARNING");
  await page.getByLabel("Condition kind").selectOption("threshold");
  assert(!(await page.getByLabel("After", { exact: true }).isVisible()), "an offline field is shown for a threshold rule");
  await page.getByLabel("Source").selectOption("point");
  await page.getByLabel("Point id").fill(COUNTER);
  await page.getByLabel("Op", { exact: true }).selectOption(">");
  await page.getByLabel("Value", { exact: true }).fill("0");
  await page.getByLabel("For", { exact: true }).fill("0s");
  await page.getByLabel(CHANNEL).check();
  await page.evaluate(() => { window.__notReloaded = true; });
  await page.getByRole("button", { name: "Preview" }).click();
  await page.getByText("would have opened").waitFor();
  const opened = Number(await page.getByTestId("preview-opened").textContent());
  assert(opened >= 1, `the preview opened ${opened} alerts on a counter over 0`);
  assert((await page.locator(`.preview-devices tr[data-device-id="${DEVICE}"]`).count()) === 1, "the preview does not list the device");
  assert(await page.evaluate(() => window.__notReloaded === true), "htmx did not enhance the preview (the page was reloaded)");
  assert((await page.getByLabel("Name").inputValue()) === RULE && (await page.getByLabel("Point id").inputValue()) === COUNTER, "the preview lost what was typed");
  assert(await page.getByLabel(CHANNEL).isChecked(), "the preview lost the channel checked");
  let [status, body] = curl(KEY, "/alert-rules?limit=100");
  assert(status === 200 && !JSON.parse(body).data.some((r) => r.name === RULE), `the preview saved the rule: ${status}`);
  await shoot(page, "rule-preview");
  await page.getByRole("button", { name: "Save rule" }).click();
  await page.getByText(`Rule “${RULE}” created.`).waitFor();
  const row = page.locator("tr[data-rule-id]", { hasText: RULE });
  assert((await row.textContent()).includes(`point.${COUNTER} > 0`), `the rule's condition in words: ${await row.textContent()}`);
  assert((await row.textContent()).includes(CHANNEL), "the rule's channel is not listed");
  await shoot(page, "rules");
  [status, body] = curl(KEY, "/alert-rules?limit=100");
  const r = JSON.parse(body).data.find((x) => x.name === RULE);
  assert(status === 200 && r && r.condition.source === `point.${COUNTER}` && r.notify.length === 1 && r.enabled, `the rule through the API: ${JSON.stringify(r)}`);
});

step("a silence of a device is created from its page and listed", async () => {
  await page.goto(`${BASE}/panel/devices/${OFFLINE}`);
  await page.getByRole("link", { name: "Silence this device" }).click();
  await page.waitForURL((u) => u.pathname === "/panel/alerts/silences");
  assert((await page.getByRole("textbox", { name: "Device ids" }).inputValue()) === OFFLINE, "the device is not prefilled");
  assert(await page.getByRole("textbox", { name: "Device ids" }).isVisible(), "the device ids field is hidden");
  await page.getByLabel("Duration").selectOption({ label: "4 h" });
  await page.getByLabel("Comment").fill("browser maintenance");
  await page.getByRole("button", { name: "Create silence" }).click();
  await page.getByText("created.").first().waitFor();
  const row = page.locator("tr[data-silence-id]", { hasText: "browser maintenance" });
  assert((await row.textContent()).includes("1 device: Gatehouse"), "the silence's row does not name the device");
  await shoot(page, "silences");
  const [status, body] = curl(KEY, "/silences");
  assert(status === 200 && JSON.parse(body).data.some((x) => x.comment === "browser maintenance"), `the silence through the API: ${status}`);
});

step("a device edited on its page is found by its tag on the fleet page", async () => {
  await page.goto(`${BASE}/panel/devices/${DEVICE}`);
  await page.getByText("Edit device", { exact: true }).click();
  await page.getByLabel("Tags", { exact: true }).fill("Press, line-1");
  await page.getByRole("button", { name: "Save device" }).click();
  await page.locator("#device-tags-error").waitFor(); // tags are lower-case
  assert((await page.getByLabel("Tags", { exact: true }).inputValue()) === "Press, line-1", "the typed tags are gone");
  await page.getByLabel("Tags", { exact: true }).fill("press, line-1");
  await page.getByLabel("Notes", { exact: true }).fill("Belt replaced <b>today</b>");
  await page.getByRole("button", { name: "Save device" }).click();
  await page.getByText("Device saved.").waitFor();
  await page.locator("#details a.tag", { hasText: "press" }).waitFor();
  assert((await page.locator("#details .notes").textContent()).includes("<b>today</b>"), "the notes are not shown as text");
  const [status, body] = curl(KEY, `/devices/${DEVICE}`);
  assert(status === 200 && JSON.stringify(JSON.parse(body).data.tags) === '["line-1","press"]', `the tags through the API: ${status} ${body}`);
  await page.getByText("Edit device", { exact: true }).click();
  await shoot(page, "device-edit");
  await page.locator("#details a.tag", { hasText: "press" }).click();
  await page.waitForURL(BASE + "/panel/?tag=press");
  await page.getByRole("link", { name: "Press line 1", exact: true }).waitFor();
  assert((await page.locator("table.devices tbody tr").count()) === 1, "the fleet filtered by press shows other devices");
  await page.getByLabel("Tag", { exact: true }).fill("line-1, press");
  await page.getByRole("button", { name: "Filter" }).click();
  await page.waitForURL((u) => u.searchParams.get("tag") === "line-1, press");
  assert((await page.locator("table.devices tbody tr").count()) === 1, "two tags: want Press line 1 alone");
  await shoot(page, "fleet-tag");
});

// Rollouts, Releases, Claims (issue 28). browser_test.go added the release
// 9.9.0 (amd64) with the relay's CLI.
let ROLLOUT;

step("a claim created in the panel is shown once with the agent's command line, and registers a gateway", async () => {
  await page.goto(BASE + "/panel/");
  await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Rollouts" }).click();
  await page.getByRole("navigation", { name: "Fleet operations" }).getByRole("link", { name: "Claims" }).click();
  await page.waitForURL(BASE + "/panel/claims");
  await page.getByLabel("Model").selectOption("IG-500");
  await page.getByLabel("Tags").fill("line-9, batch-1");
  await page.getByLabel("Uses").fill("2");
  await page.getByLabel("Expires").selectOption({ label: "30 days" });
  await page.getByRole("button", { name: "Create claim" }).click();
  await page.getByText("shown only this once").waitFor();
  const token = await page.getByTestId("new-claim").inputValue();
  assert(token.startsWith("fleet_ct_"), "no claim token is shown");
  const cmd = await page.getByTestId("claim-command").textContent();
  assert(cmd.includes(`FLEET_CLAIM='${token}' fleet-agent --relay ${BASE}`) && !cmd.includes("--claim"), `the agent's command line: ${cmd}`);
  await shoot(page, "claims");
  // A gateway registers with it (the agent's request, the token as its bearer).
  const resp = await fetch(BASE + "/agent/v1/claim", {
    method: "POST", headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
    body: JSON.stringify({ serialNumber: "BROWSER-1", model: "IG-500", name: "Claimed in the browser" }),
  });
  assert(resp.status === 200, `claiming with the token: ${resp.status} ${await resp.text()}`);
  await page.goto(BASE + "/panel/claims");
  assert(!(await page.content()).includes(token), "the claims list shows the token again");
  const row = page.locator("tr[data-claim-id]", { hasText: "line-9" });
  assert((await row.textContent()).includes("1 of 2") && (await row.textContent()).includes("active"), `the claim's row: ${await row.textContent()}`);
  await page.goto(BASE + "/panel/?tag=line-9");
  await page.getByRole("link", { name: "Claimed in the browser", exact: true }).waitFor();
});

step("Releases lists the release added with the CLI and how to add one", async () => {
  await page.goto(BASE + "/panel/releases");
  const row = page.locator("tr[data-release-id]", { hasText: "9.9.0" });
  assert((await row.textContent()).includes("amd64"), `the release's row: ${await row.textContent()}`);
  await page.getByText("fleet-relay release add").waitFor();
  await shoot(page, "releases");
});

step("a rollout started from the form (a refused field first) shows its progress by wave and device, and its end", async () => {
  await page.goto(BASE + "/panel/rollouts");
  await page.getByRole("link", { name: "New rollout" }).click();
  await page.waitForURL(BASE + "/panel/rollouts/new");
  await page.getByLabel("Version").selectOption("9.9.0");
  await page.getByLabel("Device ids", { exact: true }).first().check();
  await page.getByRole("textbox", { name: "Device ids" }).fill(OFFLINE);
  await page.getByLabel("Waves").fill("50, 10");
  await page.getByRole("button", { name: "Start rollout" }).click();
  await page.locator("#rollout-waves-error").waitFor();
  assert((await page.getByLabel("Waves").inputValue()) === "50, 10", "the typed waves are gone");
  assert((await page.getByRole("textbox", { name: "Device ids" }).inputValue()) === OFFLINE, "the typed device id is gone");
  await shoot(page, "rollout-new");
  await page.getByLabel("Waves").fill("100");
  await page.getByRole("button", { name: "Start rollout" }).click();
  await page.waitForURL((u) => /^\/panel\/rollouts\/[^/]+$/.test(u.pathname) && u.pathname !== "/panel/rollouts/new");
  ROLLOUT = page.url();
  await page.getByRole("heading", { name: "Progress by wave" }).waitFor();
  const devRow = page.locator(`tr[data-device-id="${OFFLINE}"]`);
  assert((await devRow.textContent()).includes("Gatehouse"), "the rollout does not list the Gatehouse");
  const [status, body] = curl(KEY, "/rollouts/" + ROLLOUT.split("/").pop());
  assert(status === 200 && JSON.parse(body).data.version === "9.9.0", `the rollout through the API: ${status} ${body}`);
  // The relay's engine sends the Gatehouse its update within a second. An
  // agent that announced its architecture before it was stopped leaves
  // the device pending until its health window ends: the rollout runs and
  // is paused, then canceled. One that announced none (an agent from
  // before updates) fails at once, and the rollout stops itself.
  const state = await until("the engine's first step", async () => {
    await page.goto(ROLLOUT);
    const s = (await page.locator("h1 .rstate").textContent()).trim();
    const dev = (await devRow.locator(".rstate").textContent()).trim();
    return (s === "running" && dev === "pending") || s === "stopped" ? s : null;
  }, 20_000);
  await shoot(page, "rollout");
  let ended = "stopped";
  if (state === "running") {
    await page.getByRole("button", { name: "Pause" }).click();
    await page.getByText("Rollout paused").waitFor();
    await page.getByRole("button", { name: "Resume" }).waitFor();
    await page.getByRole("button", { name: "Cancel rollout" }).click();
    await page.getByRole("heading", { name: "Cancel the rollout of 9.9.0?" }).waitFor();
    await page.getByRole("button", { name: "Cancel rollout" }).click();
    await page.getByText("Rollout canceled").waitFor();
    ended = "canceled";
  } else {
    await page.getByText(/^Stopped: .*maxFailures 0/).waitFor();
    assert((await devRow.textContent()).includes("agent reports no architecture"), `the failed device's error: ${await devRow.textContent()}`);
  }
  assert((await page.getByRole("button", { name: "Pause" }).count()) === 0, `a ${ended} rollout offers Pause`);
  await page.goto(BASE + "/panel/rollouts");
  const row = page.locator("tr[data-rollout-id]", { hasText: "9.9.0" });
  assert((await row.textContent()).includes(ended), `the rollout's row: ${await row.textContent()}`);
  await shoot(page, "rollouts");
});

step("at 360 px the rules, rule, silences, notifications, rollout, release and claim pages do not scroll sideways", async () => {
  await page.setViewportSize({ width: 360, height: 800 });
  for (const path of ["/panel/alerts/rules", "/panel/alerts/rules/new", "/panel/alerts/silences", "/panel/settings/notifications",
    "/panel/rollouts", "/panel/rollouts/new", new URL(ROLLOUT).pathname, "/panel/releases", "/panel/claims"]) {
    await page.goto(BASE + path);
    const [scroll, client] = await page.evaluate(() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]);
    assert(scroll <= client, `${path} at 360 px: ${scroll} px wide in ${client}`);
  }
  await page.setViewportSize({ width: 1280, height: 800 });
});

step("a VIEWER cannot create a key, in the page or by a replayed POST", async () => {
  const viewer = await browserContext();
  const vp = viewer.pages()[0] || (await viewer.newPage());
  await signIn(vp, VIEWER);
  assert((await vp.getByRole("link", { name: "API keys" }).count()) === 0, "a VIEWER sees the API keys link");
  const resp = await vp.goto(BASE + "/panel/settings/api-keys");
  assert(resp.status() === 403, `VIEWER on API keys: ${resp.status()}`);
  await shoot(vp, "forbidden");
  await vp.goto(BASE + "/panel/alerts/rules");
  assert((await vp.getByRole("link", { name: "New rule" }).count()) === 0, "a VIEWER sees New rule");
  assert((await vp.goto(BASE + "/panel/alerts/rules/new")).status() === 403, "a VIEWER opens the new rule form");
  assert((await vp.getByRole("link", { name: "Rollouts" }).count()) === 0, "a VIEWER sees Rollouts");
  for (const path of ["/panel/rollouts", "/panel/releases", "/panel/claims"]) {
    assert((await vp.goto(BASE + path)).status() === 403, `a VIEWER opens ${path}`);
  }
  const claim = await viewer.request.post(BASE + "/panel/claims", { form: { model: "IG-500", uses: "1", expires: "7" }, maxRedirects: 0 });
  assert(claim.status() === 403 && !(await claim.text()).includes("fleet_ct_"), `replayed claim POST as VIEWER: ${claim.status()}`);
  const replay = await viewer.request.post(BASE + "/panel/settings/api-keys", {
    form: { name: "Replayed by viewer", scope: "devices:read", expires: "7" }, maxRedirects: 0,
  });
  assert(replay.status() === 403, `replayed POST as VIEWER: ${replay.status()}`);
  await viewer.close();
  await page.goto(BASE + "/panel/settings/api-keys");
  assert(!(await page.content()).includes("Replayed by viewer"), "the VIEWER's replayed POST created a key");
});

step("a cross-origin POST is refused", async () => {
  const evil = createServer((req, res) => {
    res.setHeader("Content-Type", "text/html");
    res.end(`<!doctype html><form id=f method=post action="${BASE}/panel/settings/api-keys">
      <input name=name value="CSRF key"><input name=scope value="devices:read"><input name=expires value=never></form>
      <script>document.getElementById("f").submit()</script>`);
  });
  await new Promise((r) => evil.listen(0, "127.0.0.1", r));
  try {
    const refused = page.waitForResponse((r) => r.url() === BASE + "/panel/settings/api-keys" && r.request().method() === "POST");
    await page.goto(`http://127.0.0.1:${evil.address().port}/`);
    const resp = await refused;
    assert(resp.status() === 403, `cross-origin POST: ${resp.status()}`);
    await page.getByText("came from another site").waitFor();
  } finally {
    evil.close();
  }
  await page.goto(BASE + "/panel/settings/api-keys");
  assert(!(await page.content()).includes("CSRF key"), "the cross-origin POST created a key");
});

// Issue 30's steps, one block per lane (each uses its own user, never
// OWNER's or VIEWER's credentials, which later steps need).

// [auditread] the audit log page
step("Settings → Audit log shows the suite's own changes, filters by action and downloads them as CSV", async () => {
  await page.goto(BASE + "/panel/");
  await page.getByRole("link", { name: "Audit log" }).click();
  await page.waitForURL(BASE + "/panel/settings/audit");
  await page.getByRole("heading", { level: 1, name: "Audit log" }).waitFor();
  // The key created and revoked in the panel above: the OWNER's, to the
  // millisecond, in the browser's time zone with the ISO time kept.
  await page.getByLabel("Action").selectOption("key.");
  await page.getByRole("button", { name: "Filter" }).click();
  await page.waitForURL((u) => u.searchParams.get("action") === "key.");
  const rows = page.locator("tr[data-audit-id]");
  await rows.first().waitFor();
  const actions = (await rows.locator("td:nth-child(3)").allTextContents()).map((a) => a.trim());
  assert(actions.length > 0 && actions.every((a) => a.startsWith("key.")), `actions under key.: ${actions}`);
  for (const action of ["key.created", "key.revoked"]) {
    const row = rows.filter({ hasText: action }).filter({ hasText: OWNER.email }).first();
    assert((await row.count()) === 1, `no ${action} by ${OWNER.email}`);
    const time = row.locator("time");
    const iso = await time.getAttribute("datetime");
    assert(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/.test(iso) && Date.now() - Date.parse(iso) < 3_600_000, `${action} at ${iso}`);
    assert(/^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}$/.test((await time.textContent()).trim()), `${action} shown as ${await time.textContent()}`);
  }
  await shoot(page, "audit");
  const [download] = await Promise.all([page.waitForEvent("download"), page.getByRole("link", { name: "Download CSV" }).click()]);
  assert(/^audit-log-\d{4}-\d\d-\d\d\.csv$/.test(download.suggestedFilename()), `CSV file ${download.suggestedFilename()}`);
  const lines = readFileSync(await download.path(), "utf8").trim().split("\n");
  assert(lines[0] === "id,at,actor_kind,actor_id,actor_name,action,target_kind,target_id,ip,details", `CSV header ${lines[0]}`);
  assert(lines.slice(1).some((l) => l.includes(`,user,`) && l.includes(`,${OWNER.email},key.created,api_key,`)), `no key.created by the OWNER in the CSV:\n${lines.join("\n")}`);
  assert(lines.slice(1).every((l) => /,key\.[a-z_]+,/.test(l)), "the CSV holds rows the filter left out");
});

// [auditkeys] records of the suite's own changes
step("the audit log holds the suite's own sign-ins, device edit and claimed gateway, each the OWNER's", async () => {
  const rowsOf = async (action) => {
    await page.goto(`${BASE}/panel/settings/audit?action=${encodeURIComponent(action)}`);
    await page.getByRole("heading", { level: 1, name: "Audit log" }).waitFor();
    return page.locator("tr[data-audit-id]");
  };
  // The first step's wrong password, then the sign-in: the OWNER's, never the password.
  const failed = (await rowsOf("session.sign_in_failed")).filter({ hasText: OWNER.email });
  assert((await failed.count()) >= 1, "no failed sign-in of the OWNER");
  const failedText = await failed.last().textContent();
  assert(failedText.includes('{"reason":"password"}') && !failedText.includes("not the password"), `failed sign-in: ${failedText}`);
  const signedIn = (await rowsOf("session.signed_in")).filter({ hasText: OWNER.email }).filter({ hasText: '{"via":"password"}' });
  assert((await signedIn.count()) >= 1, "no sign-in of the OWNER via password");
  // The device edited on its page: the fields it changed, from and to, the
  // notes as text.
  const edited = (await rowsOf("device.updated")).filter({ hasText: DEVICE }).filter({ hasText: OWNER.email }).first();
  const editText = await edited.textContent();
  assert(editText.includes('"to":["line-1","press"]') && editText.includes('"to":"Belt replaced <b>today</b>"'), `device edit: ${editText}`);
  assert((await edited.locator("b").count()) === 0, "the notes in the audit log are rendered as markup");
  // The gateway claimed with the claim made in the panel: the act of the
  // OWNER, who created the claim, from the gateway's address; never a token.
  const claimed = (await rowsOf("device.claimed")).filter({ hasText: '"serialNumber":"BROWSER-1"' });
  assert((await claimed.count()) === 1, `claimed rows: ${await claimed.count()}`);
  const claimText = await claimed.textContent();
  assert(claimText.includes(OWNER.email) && claimText.includes("127.0.0.1") && !claimText.includes("fleet_ct_") && !claimText.includes("fleet_dt_"),
    `claimed: ${claimText}`);
});

// [totp] two-factor enrolment and sign-in
const TOTP = { email: env("FLEET_TOTP_EMAIL"), password: env("FLEET_TOTP_PASSWORD") };
const { createHmac } = await import("node:crypto");
// totpCode is the RFC 6238 code (HMAC-SHA-1, 30 s steps, 6 digits) of a
// base32 secret at atMs, computed here from the secret the page shows.
function totpCode(secret, atMs) {
  const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
  const bytes = [];
  let bits = 0, value = 0;
  for (const c of secret.replace(/=+$/, "")) {
    value = ((value << 5) | alphabet.indexOf(c)) & 0xffff;
    bits += 5;
    if (bits >= 8) {
      bytes.push((value >>> (bits - 8)) & 255);
      bits -= 8;
    }
  }
  const counter = Buffer.alloc(8);
  counter.writeBigUInt64BE(BigInt(Math.floor(atMs / 30_000)));
  const h = createHmac("sha1", Buffer.from(bytes)).update(counter).digest();
  const o = h[h.length - 1] & 15;
  const n = ((h[o] & 127) << 24) | (h[o + 1] << 16) | (h[o + 2] << 8) | h[o + 3];
  return String(n % 1_000_000).padStart(6, "0");
}
let totpCtx, totpPage, totpSecret, totpRecovery, totpUsed;

// totpPassword signs the TOTP user out (when signed in) and gives the
// password: the second step's page.
async function totpPassword() {
  await totpPage.goto(BASE + "/panel/login");
  await totpPage.getByLabel("Email").fill(TOTP.email);
  await totpPage.getByLabel("Password").fill(TOTP.password);
  await totpPage.getByRole("button", { name: "Sign in" }).click();
  await totpPage.waitForURL(BASE + "/panel/login/2fa");
}

async function totpVerify(code) {
  await totpPage.getByLabel("Authentication code").fill(code);
  await totpPage.getByRole("button", { name: "Verify" }).click();
  await totpPage.waitForLoadState();
}

async function totpSignOut() {
  await totpPage.getByRole("button", { name: "Sign out" }).click();
  await totpPage.getByText("You are signed out.").waitFor();
}

step("two-factor sign-in: enrol with the QR code's key and see the recovery codes once", async () => {
  totpCtx = await browserContext();
  totpPage = totpCtx.pages()[0] || (await totpCtx.newPage());
  await signIn(totpPage, TOTP);
  await totpPage.goto(BASE + "/panel/account/2fa");
  await totpPage.getByRole("heading", { name: "Two-factor sign-in" }).waitFor();
  const qr = totpPage.getByRole("img", { name: "QR code of your two-factor key" });
  await qr.waitFor();
  assert((await qr.evaluate((img) => img.naturalWidth)) > 0, "the QR code image does not load");
  totpSecret = (await totpPage.getByTestId("totp-secret").textContent()).trim();
  assert(/^[A-Z2-7]{32}$/.test(totpSecret), `the key shown is ${totpSecret}`);
  await shoot(totpPage, "2fa-enrol");
  await totpPage.getByLabel("Authentication code").fill("000000" === totpCode(totpSecret, Date.now()) ? "111111" : "000000");
  await totpPage.getByRole("button", { name: "Turn on two-factor sign-in" }).click();
  await totpPage.getByText("That code does not match.").waitFor();
  await totpPage.getByLabel("Authentication code").fill(totpCode(totpSecret, Date.now()));
  await totpPage.getByRole("button", { name: "Turn on two-factor sign-in" }).click();
  await totpPage.getByRole("heading", { name: "Two-factor sign-in is on: your recovery codes" }).waitFor();
  totpRecovery = (await totpPage.getByTestId("recovery-codes").inputValue()).split("\n");
  assert(totpRecovery.length === 10 && totpRecovery.every((c) => /^[a-z2-7]{4}(-[a-z2-7]{4}){3}$/.test(c)), `recovery codes: ${totpRecovery}`);
  await totpPage.goto(BASE + "/panel/account/2fa");
  const again = await totpPage.content();
  assert(!again.includes(totpRecovery[0]) && !again.includes(totpSecret), "the recovery codes or the key are shown again");
  await totpPage.getByText("Recovery codes left:").waitFor();
});

step("two-factor sign-in: the password leads to the code; a code signs in once, a replay is refused", async () => {
  await totpSignOut();
  await totpPassword();
  await totpPage.goto(BASE + "/panel/");
  assert(totpPage.url().startsWith(BASE + "/panel/login"), `before the code /panel/ is ${totpPage.url()}`);
  await totpPassword();
  await shoot(totpPage, "2fa-signin");
  // The enrolment spent the current step's code: the next step's code
  // (accepted a step early) signs in.
  totpUsed = totpCode(totpSecret, Date.now() + 30_000);
  await totpVerify(totpUsed);
  await totpPage.waitForURL(BASE + "/panel/");
  await totpPage.getByRole("heading", { name: "Fleet" }).waitFor();
  await totpSignOut();
  await totpPassword();
  await totpVerify(totpUsed);
  await totpPage.getByText("Wrong or already used code.").waitFor();
  assert(totpPage.url() === BASE + "/panel/login/2fa", `a replayed code went to ${totpPage.url()}`);
});

step("two-factor sign-in: a recovery code signs in once", async () => {
  await totpVerify(totpRecovery[0]);
  await totpPage.waitForURL(BASE + "/panel/");
  await totpPage.goto(BASE + "/panel/account/2fa");
  assert((await totpPage.getByTestId("recovery-left").textContent()).trim() === "9", "recovery codes left after one used");
  await totpSignOut();
  await totpPassword();
  await totpVerify(totpRecovery[0]);
  await totpPage.getByText("Wrong or already used code.").waitFor();
  assert(totpPage.url() === BASE + "/panel/login/2fa", `a used recovery code went to ${totpPage.url()}`);
  await totpCtx.close();
});

// [accounts] own password, first sign-in

// changePassword fills Change password and submits it.
async function changePassword(p, current, next) {
  await p.getByLabel("Current password").fill(current);
  await p.getByLabel("New password", { exact: true }).fill(next);
  await p.getByLabel("Repeat new password").fill(next);
  await p.getByRole("button", { name: "Change password" }).click();
}

step("[accounts] a member an OWNER adds chooses their own password at first sign-in, then changes it from Account", async () => {
  const email = "new.hire@demo.example";
  await page.goto(BASE + "/panel/settings/members");
  await page.getByLabel("Email").fill(email);
  await page.getByLabel("Role", { exact: true }).selectOption("MEMBER");
  await page.getByRole("button", { name: "Add member" }).click();
  const temporary = await page.getByTestId("new-password").inputValue();
  assert(temporary.length >= 12, `temporary password ${temporary}`);
  await page.goto(BASE + "/panel/settings/members");
  await page.getByRole("row", { name: email }).getByText("temporary password not yet changed").waitFor();

  const ctx = await browserContext();
  const mp = ctx.pages()[0] || (await ctx.newPage());
  await mp.goto(BASE + "/panel/alerts");
  await mp.getByLabel("Email").fill(email);
  await mp.getByLabel("Password").fill(temporary);
  await mp.getByRole("button", { name: "Sign in" }).click();
  await mp.waitForURL((u) => u.pathname === "/panel/account/password");
  await mp.getByText("Your password was set by someone else").waitFor();
  await mp.goto(BASE + "/panel/");
  assert(new URL(mp.url()).pathname === "/panel/account/password", `before the change /panel/ is ${mp.url()}`);
  await changePassword(mp, "not the password", "my own password 1");
  await mp.getByText("The current password is wrong.").waitFor();
  await changePassword(mp, temporary, "my own password 1");
  await mp.waitForURL(BASE + "/panel/");
  await mp.getByText("Your password is changed.").waitFor();
  await mp.getByRole("button", { name: "Sign out" }).click();
  await mp.getByText("You are signed out.").waitFor();
  await signIn(mp, { email, password: "my own password 1" });

  await mp.getByRole("link", { name: email }).click();
  await mp.waitForURL(BASE + "/panel/account");
  await mp.getByRole("heading", { name: "Change password" }).waitFor();
  await changePassword(mp, "my own password 1", "my own password 2");
  await mp.waitForURL(BASE + "/panel/account");
  await mp.getByText("Your other sessions are signed out.").waitFor();
  await shoot(mp, "account");
  await mp.goto(BASE + "/panel/alerts");
  assert(new URL(mp.url()).pathname === "/panel/alerts", `after the change this session is at ${mp.url()}`);
  await ctx.close();
  const check = await browserContext();
  const cp = check.pages()[0] || (await check.newPage());
  await signIn(cp, { email, password: "my own password 2" });
  await check.close();
});

step("[accounts] one email and password in two organizations: sign-in asks which", async () => {
  const ctx = await browserContext();
  const ap = ctx.pages()[0] || (await ctx.newPage());
  await ap.goto(BASE + "/panel/login");
  await ap.getByLabel("Email").fill(ACCOUNTS.email);
  await ap.getByLabel("Password").fill(ACCOUNTS.password);
  await ap.getByRole("button", { name: "Sign in" }).click();
  await ap.waitForURL(BASE + "/panel/login/organization");
  await ap.getByRole("heading", { name: "Choose organization" }).waitFor();
  const choices = await ap.locator("button.choice").allInnerTexts();
  assert(choices.length === 2 && choices.includes("Second Org"), `choices ${JSON.stringify(choices)}`);
  await shoot(ap, "choose-organization");
  await ap.getByRole("button", { name: "Second Org" }).click();
  await ap.waitForURL(BASE + "/panel/");
  assert((await ap.locator(".top .role").innerText()) === "OWNER", "signed in to Second Org as its OWNER");
  await ctx.close();
});

// [sso] single sign-on
const SSO = { email: env("FLEET_SSO_EMAIL"), username: env("FLEET_SSO_USERNAME"), password: env("FLEET_SSO_PASSWORD"), org: env("FLEET_SSO_ORG") };

step("single sign-on through the organization's OpenID provider", async () => {
  const ctx = await browserContext();
  try {
    const p = await ctx.newPage();
    await p.goto(BASE + "/panel/login");
    await p.getByLabel("Work account").fill(SSO.email);
    await p.getByRole("button", { name: "Continue with single sign-on" }).click();
    // The provider's own login form (zitadel/oidc's example provider).
    await p.getByLabel("Username:").fill(SSO.username);
    await p.getByLabel("Password:").fill(SSO.password);
    await p.getByRole("button", { name: "Login" }).click();
    await p.waitForURL(BASE + "/panel/");
    const who = await p.locator("form.who").innerText();
    assert(who.includes(SSO.email) && who.includes("VIEWER"), `signed in through the provider as ${who}`);
    // A second time through the ?org= link: the same member.
    await p.getByRole("button", { name: "Sign out" }).click();
    await p.goto(BASE + "/panel/login?org=" + SSO.org);
    await p.getByRole("button", { name: /^Sign in with / }).click();
    await p.getByLabel("Username:").fill(SSO.username);
    await p.getByLabel("Password:").fill(SSO.password);
    await p.getByRole("button", { name: "Login" }).click();
    await p.waitForURL(BASE + "/panel/");
  } finally {
    await ctx.close();
  }
  // The OWNER sees the configuration, never the secret.
  await page.goto(BASE + "/panel/settings/sso");
  assert((await page.getByLabel("Client secret").getAttribute("placeholder")) === "set", "the stored secret is not marked set");
  assert(!(await page.content()).includes("demo-client-secret-1"), "the client secret is shown back");
  await page.goto(BASE + "/panel/settings/members");
  assert((await page.content()).includes(SSO.email), "the member made by single sign-on is not listed");
});

step("sign out", async () => {
  await page.getByRole("button", { name: "Sign out" }).click();
  await page.getByText("You are signed out.").waitFor();
  const resp = await page.goto(BASE + "/panel/alerts");
  assert(page.url().startsWith(BASE + "/panel/login"), `after sign-out /panel/alerts is ${resp.status()} at ${page.url()}`);
});

// Issue 29's steps, one block per lane (each leaves OWNER, VIEWER and the
// demo's devices as it found them, apart from what its own step documents).

// [live] pushed updates: an agent killed → OFFLINE without reload, a new alert appears

const LIVE_DEVICE = env("FLEET_LIVE_DEVICE"); // [live] the live steps' own gateway ("Live gateway")
const LIVE_PID = Number(env("FLEET_LIVE_AGENT_PID")); // its agent, killed by the first step
let liveCtx, livePage, alertsCtx, alertsPage; // alertsPage: OWNER's, who can tick alerts

step("[live] an agent killed with the fleet page open turns OFFLINE there within 2 s of the store, without reload", async () => {
  liveCtx = await browserContext();
  livePage = liveCtx.pages()[0] || (await liveCtx.newPage());
  await signIn(livePage, VIEWER);
  const status = livePage.locator(`tr[data-device-id="${LIVE_DEVICE}"] [data-field="status"]`);
  await until("the Live gateway ONLINE on the fleet page", async () => {
    if ((await status.textContent()).includes("ONLINE")) return true;
    await livePage.reload();
    return false;
  });
  await livePage.locator('body[data-live-state="live"]').waitFor();
  // The page notes when the row says OFFLINE.
  await livePage.evaluate((id) => {
    window.__notReloaded = true;
    const cell = document.querySelector(`tr[data-device-id="${id}"] [data-field="status"]`);
    new MutationObserver(() => {
      if (!window.__offlineAt && cell.textContent.includes("OFFLINE")) window.__offlineAt = Date.now();
    }).observe(cell, { subtree: true, childList: true, characterData: true });
  }, LIVE_DEVICE);
  process.kill(LIVE_PID, "SIGKILL");
  // When the store holds OFFLINE, as the API reads it.
  let stored = 0;
  for (const end = Date.now() + 60_000; !stored && Date.now() < end;) {
    const [code, body] = curl(KEY, `/devices/${LIVE_DEVICE}`);
    if (code === 200 && JSON.parse(body).data.status === "OFFLINE") stored = Date.now();
    else await new Promise((r) => setTimeout(r, 100));
  }
  assert(stored, "the killed agent's device is not OFFLINE in the store after 60 s");
  await livePage.waitForFunction(() => window.__offlineAt, null, { timeout: 5_000 }).catch(() => {});
  const shown = await livePage.evaluate(() => window.__offlineAt);
  assert(shown, `the fleet page still says ${(await status.textContent()).trim()} 5 s after the store said OFFLINE`);
  const lag = shown - stored;
  console.log(`  [live] OFFLINE on the page ${lag} ms after the API first read it`);
  assert(lag <= 2000, `OFFLINE reached the page ${lag} ms after the store held it (bound 2 s)`);
  assert(await livePage.evaluate(() => window.__notReloaded === true), "the fleet page was reloaded");
  // The alerts page opens now, before the device_offline alert (three
  // heartbeat intervals after the kill).
  alertsCtx = await browserContext();
  alertsPage = alertsCtx.pages()[0] || (await alertsCtx.newPage());
  await signIn(alertsPage, OWNER);
  await alertsPage.goto(`${BASE}/panel/alerts`);
  assert((await alertsPage.locator("tr[data-alert-id]", { hasText: "Live gateway" }).count()) === 0, "the Live gateway's alert was open before the alerts page");
  await alertsPage.evaluate(() => { window.__notReloaded = true; });
});

step("[live] a dropped stream shows Reconnecting… and recovers", async () => {
  const banner = livePage.getByRole("status").filter({ hasText: "Reconnecting" });
  assert(!(await banner.isVisible()), "the banner shows while live");
  // The network goes away: the open stream is closed at once (live.js
  // hears "offline") and no new one gets through until it is back.
  await livePage.route("**/panel/live**", (r) => r.abort());
  await liveCtx.setOffline(true);
  await banner.waitFor({ state: "visible", timeout: 10_000 });
  await livePage.locator('body[data-live-state="reconnecting"]').waitFor();
  await liveCtx.setOffline(false);
  await livePage.unroute("**/panel/live**");
  await banner.waitFor({ state: "hidden", timeout: 40_000 });
  await livePage.locator('body[data-live-state="live"]').waitFor();
  assert(await livePage.evaluate(() => window.__notReloaded === true), "the fleet page was reloaded");
});

step("[live] a new alert appears on the open alerts page without reload, keeping the rows ticked", async () => {
  // An alert already listed (the Gatehouse's) is ticked for a bulk action:
  // the list refreshing under it keeps the tick (hx-preserve).
  const ticked = await alertsPage.locator("tr[data-alert-id]").first().getAttribute("data-alert-id");
  const box = alertsPage.locator(`#sel-${ticked}`);
  await box.check();
  const row = alertsPage.locator("tr[data-alert-id]", { hasText: "Live gateway" });
  await row.first().waitFor({ timeout: 90_000 });
  assert(await box.isChecked(), "the list's refresh dropped the ticked alert's checkbox");
  assert((await row.first().textContent()).includes("offline"), `the new row: ${await row.first().textContent()}`);
  assert(await alertsPage.evaluate(() => window.__notReloaded === true), "the alerts page was reloaded");
  await box.uncheck();
  await alertsCtx.close();
  await liveCtx.close();
});

// [glance] the fleet page at a glance

// fleetRows reads the fleet table as a person does: per row its id, status,
// alerts, CPU, memory, disk and last seen texts.
async function fleetRows(p) {
  return p.locator("table.devices tbody tr[data-device-id]").evaluateAll((rows) => rows.map((r) => {
    const f = (name) => (r.querySelector(`[data-field="${name}"]`)?.textContent || "").replace(/\s+/g, " ").trim();
    return { id: r.dataset.deviceId, status: f("status"), alerts: f("alerts"), cpu: f("cpu"), mem: f("mem"), disk: f("disk"), seen: f("seen") };
  }));
}

// stripCounts reads the overview strip: open alerts by severity and
// devices by status (and "all").
async function stripCounts(p) {
  return p.locator(".strip").evaluate((strip) => {
    const read = (attr) => Object.fromEntries([...strip.querySelectorAll(`[${attr}]`)].map((a) => [a.getAttribute(attr), Number(a.querySelector("strong").textContent)]));
    return { alerts: read("data-summary-alerts"), devices: read("data-summary-devices") };
  });
}

let glance, glancePage;
step("the fleet page at a glance: the strip's numbers match the table", async () => {
  glance = await browserContext();
  glancePage = glance.pages()[0] || (await glance.newPage());
  const p = glancePage;
  await signIn(p, VIEWER);
  // The demo's agents report metrics every 30 s: the ONLINE device shows them.
  const rows = await until("the ONLINE device's CPU, memory and disk on the fleet page", async () => {
    await p.goto(BASE + "/panel/");
    const rs = await fleetRows(p);
    const dev = rs.find((r) => r.id === DEVICE);
    return dev && /^\d+%$/.test(dev.cpu) ? rs : null;
  }, 90_000);
  const dev = rows.find((r) => r.id === DEVICE);
  assert(dev.status === "ONLINE" && /^\d+%$/.test(dev.mem) && /^\d+%$/.test(dev.disk) && /^\d+ (s|min) ago$/.test(dev.seen), `the ONLINE device reads ${JSON.stringify(dev)}`);
  const off = rows.find((r) => r.id === OFFLINE);
  assert(off && off.status === "OFFLINE" && /^(ERROR|CRITICAL) \d+ open$/.test(off.alerts), `the OFFLINE device reads ${JSON.stringify(off)}`);
  const strip = await stripCounts(p);
  assert(strip.devices.all === rows.length, `the strip counts ${strip.devices.all} devices, the table shows ${rows.length}`);
  for (const [status, n] of Object.entries(strip.devices)) {
    if (status === "all") continue;
    const shown = rows.filter((r) => r.status === status).length;
    assert(shown === n, `the strip counts ${n} ${status}, the table shows ${shown}`);
  }
  const open = rows.reduce((sum, r) => sum + Number((/(\d+) open/.exec(r.alerts) || [0, 0])[1]), 0);
  const counted = Object.values(strip.alerts).reduce((a, b) => a + b, 0);
  assert(open === counted && open >= 1, `the strip counts ${counted} open alerts, the table's rows ${open}`);
  const worst = ["CRITICAL", "ERROR", "WARNING", "INFO"].find((s) => strip.alerts[s] > 0);
  assert(rows.some((r) => r.alerts.startsWith(worst + " ")), `no row's worst alert is the strip's worst, ${worst}`);
  await p.locator(`[data-summary-alerts="${worst}"]`).click();
  await p.waitForURL((u) => u.pathname === "/panel/alerts" && u.searchParams.get("severity") === worst);
});

step("sort worst first puts a device with an open alert first, kept in the links", async () => {
  const p = glancePage;
  await p.goto(BASE + "/panel/");
  await p.getByRole("navigation", { name: "Sort" }).getByRole("link", { name: "worst first" }).click();
  await p.waitForURL((u) => u.searchParams.get("sort") === "worst");
  await p.locator("caption", { hasText: "worst first" }).waitFor();
  const rows = await fleetRows(p);
  assert(/ \d+ open$/.test(rows[0].alerts), `worst first, the first row's alerts read ${JSON.stringify(rows[0])}`);
  const ranks = rows.map((r) => ["CRITICAL", "ERROR", "WARNING", "INFO"].findIndex((s) => r.alerts.startsWith(s + " "))).map((i) => (i < 0 ? 4 : i));
  assert(ranks.every((r, i) => i === 0 || ranks[i - 1] <= r), `worst first, the rows' worst severities go ${ranks}`);
  const online = await p.locator('[data-summary-devices="ONLINE"]').getAttribute("href");
  assert(new URL(online, BASE).searchParams.get("sort") === "worst", `the status link drops the sort: ${online}`);
  await p.getByRole("button", { name: "Filter" }).click();
  await p.waitForURL((u) => u.searchParams.get("sort") === "worst");
});

step("last seen ticks by itself; a live:fleet event updates its row and the strip as text", async () => {
  const p = glancePage;
  await p.goto(BASE + "/panel/");
  await p.evaluate(() => { window.__notReloaded = true; });
  const seen = p.locator(`tr[data-device-id="${DEVICE}"] time[data-tick]`);
  const first = await until("the ONLINE device's last seen under a minute", async () => {
    const t = (await seen.textContent()).trim();
    return /^\d+ s ago$/.test(t) ? t : null;
  }, 30_000);
  await p.waitForTimeout(2_200);
  const later = (await seen.textContent()).trim();
  // It moved on: ticking, or a pushed heartbeat that set it back to "now".
  assert(later !== first && /^(now|\d+ s ago|1 min ago)$/.test(later), `last seen read ${first}, then ${later}`);
  await p.evaluate((id) => document.body.dispatchEvent(new CustomEvent("live:fleet", { detail: {
    devices: [{ id, status: "ONLINE", lastSeen: new Date(Date.now() - 5000).toISOString(), cpuPct: 12.4, memPct: 45.6, diskUsedPct: null,
      openAlerts: 3, worst: "<img src=x onerror=window.__xss=1>" }],
    summary: { devices: { ONLINE: 41, OFFLINE: 1 }, openAlerts: { CRITICAL: 9 } },
  } })), DEVICE);
  const row = (await fleetRows(p)).find((r) => r.id === DEVICE);
  assert(row.cpu === "12%" && row.mem === "46%" && row.disk === "—" && /^\d s ago$/.test(row.seen) && row.alerts.endsWith(" 3 open"), `after live:fleet the row reads ${JSON.stringify(row)}`);
  assert((await p.locator("table.devices img").count()) === 0 && (await p.evaluate(() => window.__xss)) === undefined, "live:fleet put markup in the table");
  const strip = await stripCounts(p);
  assert(strip.alerts.CRITICAL === 9 && strip.devices.ONLINE === 41 && strip.devices.all === 42, `after live:fleet the strip reads ${JSON.stringify(strip)}`);
  assert(await p.evaluate(() => window.__notReloaded === true), "the page reloaded");
});

step("the fleet page fits 390 px and 1366 px without scrolling sideways", async () => {
  const p = glancePage;
  for (const width of [390, 1366]) {
    await p.setViewportSize({ width, height: 800 });
    for (const path of ["/panel/", "/panel/?sort=worst"]) {
      await p.goto(BASE + path);
      const [scroll, client] = await p.evaluate(() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]);
      assert(scroll <= client, `${path} at ${width} px: ${scroll} px wide in ${client}`);
      const table = await p.locator("table.devices").boundingBox();
      assert(table.x >= 0 && table.x + table.width <= width, `${path} at ${width} px: the table spans ${table.x}–${table.x + table.width}`);
      const cpu = p.locator(`tr[data-device-id="${DEVICE}"] [data-field="cpu"]`);
      assert(await cpu.isVisible(), `${path} at ${width} px: the CPU column is hidden`);
    }
  }
  await glance.close();
});

// [forms] channel forms round trip per kind
const FORMS = env("FLEET_FORMS_DEVICE"); // an IG-500 of this suite's own, no agent

// apiPut PUTs a JSON body with the demo's key; [status, body].
function apiPut(path, body) {
  const out = execFileSync("curl", ["-sS", "--max-time", "10", "-X", "PUT", "-w", "\n%{http_code}", "-H", `Authorization: Bearer ${KEY}`,
    "-H", "Content-Type: application/json", "-d", JSON.stringify(body), API + path], { encoding: "utf8" });
  const i = out.lastIndexOf("\n");
  return [Number(out.slice(i + 1)), out.slice(0, i)];
}

// storedConfig is channel ch's config of the forms device, through the API.
function storedConfig(ch) {
  const [status, body] = curl(KEY, `/devices/${FORMS}/serial/channels/${ch}`);
  assert(status === 200, `GET ${ch}: ${status} ${body}`);
  return JSON.parse(body).data.config;
}

// channelForm opens ch's configuration on the forms device's page.
async function channelForm(ch) {
  await page.goto(`${BASE}/panel/devices/${FORMS}`);
  const details = page.locator(`#config-${ch}`);
  if ((await details.getAttribute("open")) === null) await details.locator("summary").click();
  return details.locator("form.channel-form");
}

async function saveForm(form, ch) {
  await form.getByRole("button", { name: `Save ${ch}`, exact: true }).click();
  await page.getByText(`Configuration of ${ch} saved`).waitFor();
}

// sameConfig compares two configs as JSON values (members in any order).
function sameConfig(got, want, what) {
  const deep = (v) => (Array.isArray(v) ? v.map(deep) : v && typeof v === "object" ? Object.fromEntries(Object.keys(v).sort().map((k) => [k, deep(v[k])])) : v);
  assert(JSON.stringify(deep(got)) === JSON.stringify(deep(want)), `${what}: stored ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
}

// pressInForm clicks a button of ch's form that sends it back (Add,
// Remove) and returns the form of the page that answers.
async function pressInForm(ch, name) {
  const form = page.locator(`#config-${ch} form.channel-form`);
  await Promise.all([page.waitForNavigation(), form.getByRole("button", { name, exact: true }).click()]);
  return page.locator(`#config-${ch} form.channel-form`);
}

const README_RS485 = { kind: "rs485", baudRate: 19200, dataBits: 8, parity: "even", stopBits: 1, mode: "modbus_rtu_master", slaveId: 7,
  tx: { enabled: true, intervalMs: 0, register: 10, value: 42 } };

step("[forms] rs485 without poll (the README's PUT) shows Poll, round-trips, and turns polling on", async () => {
  await signIn(page, OWNER); // signed out by the steps before; signed out again at the end of these
  const [status, body] = apiPut(`/devices/${FORMS}/serial/channels/rs485-1`, README_RS485);
  assert(status === 200, `the README's PUT: ${status} ${body}`);
  let form = await channelForm("rs485-1");
  assert(!(await form.getByLabel("Poll: enabled", { exact: true }).isChecked()), "Poll: enabled is checked for a config without poll");
  assert((await form.getByLabel("Poll: interval (ms)", { exact: true }).inputValue()) === "1000", "Poll: interval (ms) is not its default");
  assert((await form.getByLabel("Poll: function", { exact: true }).inputValue()) === "holding", "Poll: function is not its default");
  await form.getByLabel("Parity", { exact: true }).selectOption("odd");
  await saveForm(form, "rs485-1");
  sameConfig(storedConfig("rs485-1"), { ...README_RS485, parity: "odd" }, "rs485-1 saved without poll");
  form = await channelForm("rs485-1");
  await form.getByLabel("Poll: enabled", { exact: true }).check();
  await form.getByLabel("Poll: register", { exact: true }).fill("100");
  await saveForm(form, "rs485-1");
  sameConfig(storedConfig("rs485-1"), { ...README_RS485, parity: "odd",
    poll: { enabled: true, intervalMs: 1000, register: 100, count: 2, function: "holding" } }, "rs485-1 with polling switched on");
});

step("[forms] rs485 with poll: a point and an extra poll added, one removed, without JavaScript's help", async () => {
  await channelForm("rs485-1");
  let form = await pressInForm("rs485-1", "Add point");
  await form.getByLabel("Point 1: name", { exact: true }).fill("boiler_temp");
  await form.getByLabel("Point 1: register", { exact: true }).fill("10");
  await form.getByLabel("Point 1: type", { exact: true }).selectOption("f32");
  await form.getByLabel("Point 1: unit", { exact: true }).fill("°C");
  form = await pressInForm("rs485-1", "Add extra poll");
  assert((await form.getByLabel("Point 1: name", { exact: true }).inputValue()) === "boiler_temp", "Add extra poll lost the point's name");
  await form.getByLabel("Extra poll 1: slave id", { exact: true }).fill("9");
  form = await pressInForm("rs485-1", "Add point");
  await form.getByLabel("Point 2: name", { exact: true }).fill("spare");
  form = await pressInForm("rs485-1", "Remove point 2");
  assert((await form.getByLabel("Point 2: name", { exact: true }).count()) === 0, "Remove point 2 left it");
  sameConfig(storedConfig("rs485-1").points || [], [], "Add and Remove saved something");
  await saveForm(form, "rs485-1");
  const got = storedConfig("rs485-1");
  sameConfig(got.points, [{ name: "boiler_temp", slaveId: 7, function: "holding", register: 10, type: "f32", order: "ABCD", scale: 1, unit: "°C", intervalMs: 1000 }], "rs485-1's points");
  sameConfig(got.polls, [{ enabled: true, intervalMs: 1000, register: 0, count: 2, function: "holding", slaveId: 9 }], "rs485-1's extra polls");
});

step("[forms] canfd: a bad value is shown beside its field with the input kept, then saved", async () => {
  const form = await channelForm("canfd-1");
  await form.getByLabel("Nominal bitrate", { exact: true }).selectOption("250000");
  await form.getByLabel("Sample point", { exact: true }).fill("0.8");
  await form.getByLabel("Send: enabled", { exact: true }).check();
  await form.getByLabel("Send: interval (ms)", { exact: true }).fill("500");
  await form.getByLabel("Send: CAN id", { exact: true }).fill("1a");
  await form.getByLabel("Send: data (hex)", { exact: true }).fill("01 02 03 04 05 06 07 08 09");
  await Promise.all([page.waitForNavigation(), form.getByRole("button", { name: "Save canfd-1", exact: true }).click()]);
  const data = page.locator("#config-canfd-1").getByLabel("Send: data (hex)", { exact: true });
  await page.locator("#f-canfd-1-tx-dataHex-error").waitFor();
  assert((await data.getAttribute("aria-invalid")) === "true", "the bad field is not aria-invalid");
  assert((await data.getAttribute("aria-describedby")).includes("f-canfd-1-tx-dataHex-error"), "the error does not describe its field");
  assert((await page.locator("#f-canfd-1-tx-dataHex-error").textContent()).includes("is not a CAN-FD length"), "the error's text");
  const again = page.locator("#config-canfd-1 form.channel-form");
  assert((await again.getByLabel("Nominal bitrate", { exact: true }).inputValue()) === "250000", "the nominal bitrate typed was lost");
  assert((await again.getByLabel("Send: CAN id", { exact: true }).inputValue()) === "1a", "the CAN id typed was lost");
  await data.fill("01 0a");
  await saveForm(again, "canfd-1");
  sameConfig(storedConfig("canfd-1"), { kind: "canfd", nominalBitrate: 250000, dataBitrate: 2000000, samplePoint: 0.8, listenOnly: false,
    tx: { enabled: true, intervalMs: 500, canId: "0x1A", dataHex: "01 0A" } }, "canfd-1");
});

step("[forms] uart round-trips (Enter in a field saves)", async () => {
  const form = await channelForm("uart-1");
  await form.getByLabel("Baud rate", { exact: true }).selectOption("9600");
  await form.getByLabel("Flow control", { exact: true }).selectOption("rtscts");
  await form.getByLabel("Send: enabled", { exact: true }).check();
  await form.getByLabel("Send: data (hex)", { exact: true }).fill("41 54 0D 0A");
  await form.getByLabel("Send: data (hex)", { exact: true }).press("Enter");
  await page.getByText("Configuration of uart-1 saved").waitFor();
  sameConfig(storedConfig("uart-1"), { kind: "uart", baudRate: 9600, dataBits: 8, parity: "none", stopBits: 1, flowControl: "rtscts",
    tx: { enabled: true, intervalMs: 0, dataHex: "41 54 0D 0A" } }, "uart-1");
});

step("[forms] gpio in and gpio out round-trip", async () => {
  let form = await channelForm("gpio-1");
  assert((await form.getByLabel("Debounce (ms)", { exact: true }).inputValue()) === "20", "gpio-1's debounce is not its default");
  await form.getByLabel("Pull", { exact: true }).selectOption("down");
  await form.getByLabel("Debounce (ms)", { exact: true }).fill("50");
  await saveForm(form, "gpio-1");
  sameConfig(storedConfig("gpio-1"), { kind: "gpio", direction: "in", pull: "down", debounceMs: 50, tx: { enabled: false, intervalMs: 0, value: 0 } }, "gpio-1 (in)");
  form = await channelForm("gpio-2");
  await form.getByLabel("Direction", { exact: true }).selectOption("out");
  await form.getByLabel("Pull", { exact: true }).selectOption("none");
  await form.getByLabel("Debounce (ms)", { exact: true }).fill("0");
  await form.getByLabel("Send: enabled", { exact: true }).check();
  await form.getByLabel("Send: interval (ms)", { exact: true }).fill("1000");
  await form.getByLabel("Send: value", { exact: true }).fill("1");
  await saveForm(form, "gpio-2");
  sameConfig(storedConfig("gpio-2"), { kind: "gpio", direction: "out", pull: "none", debounceMs: 0, tx: { enabled: true, intervalMs: 1000, value: 1 } }, "gpio-2 (out)");
});

step("[forms] sign out, as the steps before left the browser", async () => {
  await page.goto(BASE + "/panel/");
  if (page.url().startsWith(BASE + "/panel/login")) return;
  await page.getByRole("button", { name: "Sign out" }).click();
  await page.getByText("You are signed out.").waitFor();
});

// [charts] chart ranges, no sensor, live samples
const PROBE = env("FLEET_CHARTS_DEVICE"); // [charts] an IG-100 whose host has no thermal sensor, a sample every 2 s

// chartLength is the number of samples in a chart's uPlot instance (panel.js
// keeps it on the figure), -1 without one.
const chartLength = (p, selector) => p.evaluate((sel) => {
  const fig = document.querySelector(sel);
  return fig && fig._chart ? fig._chart.data[0].length : -1;
}, selector);
// The [charts] steps browse as the VIEWER in a browser of their own.
let chartsCtx, cp;

step("[charts] a new device opens on 1 h; a range in the URL is kept", async () => {
  chartsCtx = await browserContext();
  cp = chartsCtx.pages()[0] || (await chartsCtx.newPage());
  await signIn(cp, VIEWER);
  for (const id of [DEVICE, PROBE]) {
    await cp.goto(`${BASE}/panel/devices/${id}`);
    const current = cp.locator('#charts nav.ranges a[aria-current="true"]');
    assert((await current.textContent()) === "1h", `device ${id} opens on ${await current.textContent()}`);
    assert(/, last 1 h$/.test(await cp.locator('.chart[data-series="cpuPct"] figcaption').textContent()), "the CPU chart's caption does not name the range");
  }
  await cp.goto(`${BASE}/panel/devices/${PROBE}?range=24h`);
  assert((await cp.locator('#charts nav.ranges a[aria-current="true"]').textContent()) === "24h", "?range=24h was not kept");
});

step("[charts] a host without a thermal sensor shows No sensor, not 0 °C", async () => {
  await until("the probe's first samples", async () => {
    await cp.goto(`${BASE}/panel/devices/${PROBE}`);
    return (await chartLength(cp, '.chart[data-series="cpuPct"]')) > 0;
  }, 60_000);
  const temp = cp.locator('.chart[data-series="tempCpu"]');
  assert((await temp.getAttribute("data-no-sensor")) === "true", "the temperature chart is not marked no-sensor");
  assert((await temp.locator(".plot").textContent()).trim() === "No sensor", `the temperature chart says ${await temp.locator(".plot").textContent()}`);
  assert((await temp.locator("canvas").count()) === 0, "the temperature chart drew a line");
  assert((await cp.locator('.chart[data-series="cpuPct"] canvas').count()) === 1, "the CPU chart drew nothing");
  // The API says the same: tempCpu a number (0), missing naming it.
  const [status, body] = curl(KEY, `/devices/${PROBE}/metrics`);
  const data = JSON.parse(body).data;
  assert(status === 200 && data.length > 0 && data.every((m) => m.tempCpu === 0 && JSON.stringify(m.missing) === '["tempCpu"]'), `the API's samples: ${body.slice(0, 300)}`);
});

step("[charts] a live:device event appends the samples since the chart's last one", async () => {
  await cp.goto(`${BASE}/panel/devices/${PROBE}?range=1h`);
  const before = await chartLength(cp, '.chart[data-series="cpuPct"]');
  assert(before > 0, `the chart holds ${before} samples`);
  await cp.evaluate(() => { window.__chartsNotReloaded = true; });
  const asked = [];
  cp.on("request", (r) => { if (r.url().includes(`/panel/devices/${PROBE}/metrics.json`)) asked.push(r.url()); });
  // The event as live.js dispatches it (the live lane's stream); the probe
  // samples every 2 s, so a few events see new samples.
  await until("new samples appended to the chart", async () => {
    await cp.evaluate(() => document.body.dispatchEvent(new CustomEvent("live:device", { detail: {} })));
    await cp.waitForTimeout(1000);
    return (await chartLength(cp, '.chart[data-series="cpuPct"]')) > before;
  }, 30_000);
  await cp.waitForTimeout(500); // a fetch asked for meanwhile has landed
  const [n, points, count] = await cp.evaluate(() => {
    const fig = document.querySelector('.chart[data-series="cpuPct"]');
    return [fig._chart.data[0].length, Number(fig.getAttribute("data-points")), document.getElementById("charts-count").textContent];
  });
  assert(asked.length > 0 && asked.every((u) => /[?&]since=\d+(\.\d+)?(&|$)/.test(u) && /[?&]range=1h(&|$)/.test(u)), `chart data asked for: ${asked.join(" ")}`);
  assert(points === n, `data-points ${points}, the chart ${n}`);
  assert(count === `${n} samples in the last 1h.`, `the count says ${count} for ${n}`);
  assert((await cp.locator('.chart[data-series="tempCpu"] .plot').textContent()).trim() === "No sensor", "the temperature chart lost its No sensor");
  assert(await cp.evaluate(() => window.__chartsNotReloaded === true), "the page was reloaded");
});

step("[charts] a point's chart appends its new buckets on live:device", async () => {
  await cp.goto(`${BASE}/panel/devices/${DEVICE}/points/${COUNTER}`);
  assert((await cp.locator('nav.ranges a[aria-current="true"]').textContent()) === "1 h", "the demo's point does not open on 1 h");
  assert((await chartLength(cp, ".point-chart")) > 0, "the point chart holds no bucket");
  const last = () => cp.evaluate(() => { const d = document.querySelector(".point-chart")._chart.data[0]; return d[d.length - 1]; });
  const first = await last();
  await until("a newer bucket appended to the point chart", async () => {
    await cp.evaluate(() => document.body.dispatchEvent(new CustomEvent("live:device", { detail: {} })));
    await cp.waitForTimeout(1000);
    return (await last()) > first;
  }, 30_000);
  await chartsCtx.close();
});

// [small] the smaller items

step("[small] no console error on any page, signed out or in: the icon is served, titles read \"<Page> · Fleet\"", async () => {
  const ctx = await browserContext();
  try {
    const p = ctx.pages()[0] || (await ctx.newPage());
    const errors = [];
    p.on("console", (m) => { if (m.type() === "error") errors.push(`${p.url()}: ${m.text()}`); });
    p.on("response", (r) => { if (r.status() >= 400) errors.push(`${p.url()}: ${r.status()} ${r.url()}`); });
    const titles = [];
    const visit = async (path) => {
      await p.goto(BASE + path);
      await p.waitForLoadState("load");
      await p.waitForTimeout(300); // the icon is fetched after load
      titles.push([path, await p.title()]);
    };
    await visit("/panel/login");
    await signIn(p, OWNER);
    for (const path of ["/panel/", `/panel/devices/${DEVICE}`, "/panel/alerts", "/panel/settings/api-keys", "/panel/settings/webhooks", "/panel/settings/members"]) {
      await visit(path);
    }
    assert(errors.length === 0, `console errors: ${errors.join("; ")}`);
    for (const [path, t] of titles) {
      const parts = t.split(" · ");
      assert(parts[parts.length - 1] === "Fleet" && new Set(parts).size === parts.length, `${path}: title "${t}"`);
    }
    assert(titles.find(([path]) => path === "/panel/")[1] === "Fleet", "the fleet page's title");
    const icon = await p.request.get(BASE + "/favicon.ico");
    assert(icon.status() === 200 && icon.headers()["content-type"] === "image/x-icon", `/favicon.ico: ${icon.status()} ${icon.headers()["content-type"]}`);
  } finally {
    await ctx.close();
  }
});

step("[small] the only OWNER is offered neither Change role nor Disable on their own row, and is told why", async () => {
  const ctx = await browserContext();
  try {
    const p = ctx.pages()[0] || (await ctx.newPage());
    await signIn(p, OWNER);
    await p.goto(BASE + "/panel/settings/members");
    const row = p.locator("tr[data-member-id]").filter({ hasText: OWNER.email });
    assert((await row.count()) === 1, `${await row.count()} rows of ${OWNER.email}`);
    // The demo's organization has one OWNER: nobody is offered its role.
    const owners = await p.locator("tr[data-member-id] select option[selected]").filter({ hasText: /^OWNER$/ }).count();
    assert(owners === 0, `${owners} other OWNER rows offer a role change: the demo has one OWNER`);
    assert((await row.getByRole("button", { name: "Change role" }).count()) === 0, "the only OWNER is offered Change role");
    assert((await row.getByRole("button", { name: "Disable" }).count()) === 0, "the only OWNER is offered Disable");
    await row.getByText("The only active OWNER").waitFor();
    const other = p.locator("tr[data-member-id]").filter({ hasText: VIEWER.email });
    assert((await other.getByRole("button", { name: "Change role" }).count()) === 1, "the VIEWER's row lacks Change role");
  } finally {
    await ctx.close();
  }
});

step("[small] API key ids stay on one line at 1366 and 390 px", async () => {
  const ctx = await browserContext();
  try {
    const p = ctx.pages()[0] || (await ctx.newPage());
    await signIn(p, OWNER);
    await p.goto(BASE + "/panel/settings/api-keys");
    const ids = p.locator("table.keys code.id");
    const n = await ids.count();
    assert(n >= 1, "no key ids listed");
    for (const width of [1366, 390]) {
      await p.setViewportSize({ width, height: 800 });
      for (let i = 0; i < n; i++) {
        const id = ids.nth(i);
        const [box, line, text] = await Promise.all([id.boundingBox(), id.evaluate((el) => parseFloat(getComputedStyle(el).lineHeight) || parseFloat(getComputedStyle(el).fontSize) * 1.5), id.innerText()]);
        // One line plus a horizontal scroll bar at most.
        assert(box.height < line * 1.9, `at ${width} px key id ${text} is ${box.height} px high (a line is ${line} px)`);
        assert(/^\S+$/.test(text), `key id "${text}" is not whole`);
      }
    }
  } finally {
    await ctx.close();
  }
});

let passed = 0, failed = 0;
for (const [i, s] of steps.entries()) {
  try {
    await s.fn();
    passed++;
    console.log(`ok ${i + 1} - ${s.name}`);
  } catch (e) {
    failed++;
    console.log(`not ok ${i + 1} - ${s.name}\n  ${String(e.stack || e).split("\n").join("\n  ")}`);
    if (page) await page.screenshot({ path: join(SHOTS, `failed-${i + 1}.png`), fullPage: true }).catch(() => {});
  }
}
await owner?.close();
for (const d of profiles) rmSync(d, { recursive: true, force: true });
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
