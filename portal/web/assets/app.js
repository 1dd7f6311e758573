// svc log portal: the browser side of SPEC.md's "Portal" routes. Plain JavaScript, no
// framework, nothing loaded from elsewhere, no inline script or style, so the server can
// send Content-Security-Policy: default-src 'self'. Every write is JSON with
// Content-Type: application/json; every error the server sends is shown as it says it.
// Text from the server is only ever set with textContent, never parsed as HTML.
'use strict';

(function () {
  const $ = (id) => document.getElementById(id);
  const SVG = 'http://www.w3.org/2000/svg';

  // What the page knows. A new token lives only here: a reload forgets it, which is
  // what "shown once" means in the browser.
  const state = { me: null, overview: null, newToken: null, revoke: null, loaded: false, keepMessages: false };

  // ---- talking to the portal -------------------------------------------------------

  class APIError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  // api calls the portal's JSON API. Writes always carry a JSON body and the JSON
  // content type (the portal refuses anything else). A non-2xx answer becomes an
  // APIError whose message is the server's own error text.
  async function api(method, path, body) {
    const init = { method, credentials: 'same-origin', headers: { Accept: 'application/json' }, cache: 'no-store' };
    if (method !== 'GET') {
      init.headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body === undefined ? {} : body);
    }
    let res;
    try {
      res = await fetch(path, init);
    } catch (e) {
      throw new APIError(0, 'The portal did not answer (' + e.message + '). Check your connection and try again.');
    }
    const text = await res.text();
    let data = null;
    if (text) {
      try { data = JSON.parse(text); } catch (e) { data = null; }
    }
    if (!res.ok) {
      throw new APIError(res.status, errorText(res, data, text));
    }
    return data || {};
  }

  function errorText(res, data, text) {
    let msg = '';
    if (data && typeof data === 'object') {
      msg = typeof data.error === 'string' ? data.error : (data.error && typeof data.error.message === 'string' ? data.error.message : '');
      if (!msg && typeof data.message === 'string') msg = data.message;
    }
    if (!msg) msg = text.trim().slice(0, 300) || res.statusText || 'request failed';
    msg = msg.charAt(0).toUpperCase() + msg.slice(1);
    if (res.status === 429) {
      const after = parseInt(res.headers.get('Retry-After') || '', 10);
      if (after > 0) msg += ' (try again in ' + duration(after) + ')';
    }
    return msg;
  }

  function duration(s) {
    if (s < 90) return s + ' second' + (s === 1 ? '' : 's');
    const m = Math.round(s / 60);
    return m + ' minute' + (m === 1 ? '' : 's');
  }

  // ---- messages --------------------------------------------------------------------

  let statusTimer = 0;

  function clearMessages() {
    $('error').hidden = true;
    $('error').textContent = '';
    $('status').hidden = true;
    $('status').textContent = '';
  }

  function showStatus(text, fade) {
    clearTimeout(statusTimer);
    $('error').hidden = true;
    const el = $('status');
    el.textContent = text;
    el.hidden = false;
    if (fade) statusTimer = setTimeout(() => { el.hidden = true; el.textContent = ''; }, 4000);
  }

  function showError(err) {
    clearTimeout(statusTimer);
    $('status').hidden = true;
    const el = $('error');
    el.textContent = err instanceof Error ? err.message : String(err);
    el.hidden = false;
    el.scrollIntoView({ block: 'nearest' });
  }

  // busy disables a button while its request runs.
  async function busy(button, fn) {
    button.disabled = true;
    button.setAttribute('aria-busy', 'true');
    try {
      return await fn();
    } finally {
      button.disabled = false;
      button.removeAttribute('aria-busy');
    }
  }

  // failed shows an error; a 401 from a signed-in page means the session ended.
  function failed(err) {
    if (err instanceof APIError && err.status === 401 && state.me) {
      signedOut();
      go('login');
      showError('Your session has ended. Log in again.');
      return;
    }
    showError(err);
  }

  // ---- views -----------------------------------------------------------------------

  const titles = { register: 'Create your log', login: 'Log in', dashboard: 'Dashboard', loading: 'Loading' };

  function show(view) {
    for (const v of ['loading', 'register', 'login', 'dashboard']) {
      $('view-' + v).hidden = v !== view;
    }
    document.title = titles[view] + ' · svc log portal';
    $('account').hidden = !state.me;
    if (state.me) $('account-email').textContent = state.me.email || '';
  }

  // route shows the view the address asks for, or the one the session allows.
  function route() {
    const want = location.hash.replace(/^#\/?/, '');
    let view = want;
    if (state.me) view = 'dashboard';
    else if (view !== 'login' && view !== 'register') view = 'register';
    if (view !== want) {
      history.replaceState(null, '', '#/' + view);
    }
    const changed = $('view-' + view).hidden;
    // A message belongs to the view it was shown on, unless the page itself moved on
    // to say it (go), as after logging out or when the session ended.
    if (changed && !state.keepMessages) clearMessages();
    state.keepMessages = false;
    show(view);
    if (view === 'dashboard' && changed) loadOverview();
    if (changed && state.loaded) {
      const h = $('view-' + view).querySelector('h1');
      if (h) h.focus();
    }
  }

  function go(view) {
    state.keepMessages = true;
    if (location.hash === '#/' + view) route();
    else location.hash = '#/' + view;
  }

  function signedOut() {
    state.me = null;
    state.overview = null;
    state.newToken = null;
    renderNewToken();
  }

  // ---- forms -----------------------------------------------------------------------

  // check marks the fields that fail the browser's own constraints and says why, before
  // anything is sent; the server checks again and its answer is shown as it is.
  function check(form, rules) {
    let first = null;
    const problems = [];
    for (const [id, why] of rules) {
      const input = $(id);
      const bad = !input.checkValidity();
      input.setAttribute('aria-invalid', bad ? 'true' : 'false');
      if (bad) {
        problems.push(why);
        if (!first) first = input;
      }
    }
    if (first) {
      showError(problems.join(' '));
      first.focus();
      return false;
    }
    return true;
  }

  // onSubmit makes a form's submit handler: it checks the fields against rules, then
  // runs send with the submit button disabled and shows any error.
  function onSubmit(rules, send) {
    return async (ev) => {
      ev.preventDefault();
      clearMessages();
      const form = ev.currentTarget;
      if (!check(form, rules)) return;
      await busy(form.querySelector('button[type=submit]'), async () => {
        try {
          await send(form);
        } catch (err) {
          failed(err);
        }
      });
    };
  }

  const onRegister = onSubmit([
    ['register-email', 'Enter your email address.'],
    ['register-password', 'The password needs at least 10 characters.'],
    ['register-tenant', 'The tenant name needs 3 to 40 characters: lowercase letters, digits and hyphens.'],
  ], async (form) => {
    showStatus('Creating your log…');
    const r = await api('POST', '/api/register', {
      email: $('register-email').value.trim(),
      password: $('register-password').value,
      tenant: $('register-tenant').value.trim(),
    });
    state.newToken = { token: r.token, tokenHash: r.tokenHash, label: 'Your first key', welcome: r.welcome || '' };
    form.reset();
    state.me = await api('GET', '/api/me');
    clearMessages();
    go('dashboard');
  });

  const onLogin = onSubmit([
    ['login-email', 'Enter your email address.'],
    ['login-password', 'Enter your password.'],
  ], async (form) => {
    await api('POST', '/api/login', { email: $('login-email').value.trim(), password: $('login-password').value });
    state.me = await api('GET', '/api/me');
    form.reset();
    go('dashboard');
  });

  async function onLogout() {
    clearMessages();
    await busy($('logout'), async () => {
      try {
        await api('POST', '/api/logout', {});
      } catch (err) {
        if (!(err instanceof APIError && err.status === 401)) {
          showError(err);
          return;
        }
      }
      signedOut();
      go('login');
      showStatus('You are logged out.', true);
    });
  }

  // ---- dashboard -------------------------------------------------------------------

  async function loadOverview() {
    const view = $('view-dashboard');
    view.setAttribute('aria-busy', 'true');
    try {
      const [me, ov] = await Promise.all([api('GET', '/api/me'), api('GET', '/api/overview')]);
      state.me = me;
      state.overview = ov;
      renderOverview();
    } catch (err) {
      failed(err);
    } finally {
      view.removeAttribute('aria-busy');
    }
  }

  function num(n) {
    return Number(n || 0).toLocaleString('en-US');
  }

  // when formats a timestamp the same way for everyone: UTC, to the minute.
  function when(s) {
    if (!s) return '';
    const d = new Date(s);
    if (isNaN(d.getTime())) return String(s);
    return d.toISOString().slice(0, 16).replace('T', ' ') + ' UTC';
  }

  function setText(id, text) {
    $(id).textContent = text;
  }

  function renderOverview() {
    const ov = state.overview;
    const me = state.me || {};
    $('account-email').textContent = me.email || '';
    setText('d-tenant', ov.tenant || me.tenant || '');
    $('d-disabled').hidden = !me.disabled;

    // Plan and billing.
    const plan = ov.plan || me.plan || 'free';
    setText('d-plan', plan);
    const status = ov.billing && ov.billing.status;
    $('d-billing-status').hidden = !status;
    setText('d-billing-status', status ? 'Subscription: ' + status : '');
    $('billing-off').hidden = !!ov.stripe;
    $('upgrade').hidden = !(ov.stripe && plan === 'free');
    $('manage').hidden = !(ov.stripe && ov.billing);

    // Usage against quota.
    const used = Number(ov.used || 0);
    const quota = Number(ov.quota || 0);
    setText('d-used', num(used));
    const meter = $('d-meter');
    if (quota > 0) {
      const pct = Math.min(100, Math.floor((used / quota) * 100));
      const share = used > 0 && pct < 1 ? 'under 1%' : pct + '%';
      let text = 'of ' + num(quota) + ' allowed this month on the ' + plan + ' plan (' + share + ').';
      if (used >= quota) text += ' The allowance is used: the log refuses appends until the first of next month.';
      setText('d-quota-text', text);
      meter.hidden = false;
      meter.value = Math.min(1, used / quota);
      meter.setAttribute('aria-valuetext', num(used) + ' of ' + num(quota) + ' appends');
    } else {
      setText('d-quota-text', 'No monthly allowance applies on the ' + plan + ' plan.');
      meter.hidden = true;
    }

    // The log.
    setText('d-tree-size', num(ov.treeSize) + (Number(ov.treeSize) === 1 ? ' leaf' : ' leaves'));
    setText('d-log-id', ov.logId || me.logId || '(none)');
    setText('d-root', ov.rootHash || '(empty log)');
    const cp = ov.latestCheckpoint;
    setText('d-checkpoint', cp ? num(cp.treeSize) + ' leaves, signed ' + when(cp.signedAt) : 'None yet: the log signs one a few minutes after it grows.');

    renderChart(ov.months || [], quota);

    $('d-export').value = ov.exportCommand || '';
    const urls = ov.urls || {};
    for (const name of ['log', 'keys', 'checkpoints']) {
      // A row the server gave no address for is left out, label and all.
      const code = $('d-url-' + name);
      code.textContent = urls[name] || '';
      const dd = code.parentElement;
      dd.hidden = !urls[name];
      dd.previousElementSibling.hidden = !urls[name];
    }

    renderKeys(ov.keys || []);
    renderAudit(ov.audit || []);
    renderNewToken();
  }

  // fit grows a read-only text area to show all of its text at the current width.
  function fit(ta) {
    if (ta.offsetParent === null) return;
    let rows = 1;
    ta.rows = rows;
    while (ta.scrollHeight > ta.clientHeight + 1 && rows < 12) ta.rows = ++rows;
  }

  function fitAll() {
    for (const ta of document.querySelectorAll('textarea.fit')) fit(ta);
  }

  function renderNewToken() {
    const t = state.newToken;
    $('new-token').hidden = !t;
    $('new-token-value').value = t ? t.token || '' : '';
    setText('new-token-label', t ? t.label : '');
    setText('new-token-hash', t ? t.tokenHash || '' : '');
    const w = $('new-token-welcome');
    w.hidden = !(t && t.welcome);
    w.textContent = t && t.welcome ? t.welcome : '';
    fitAll();
  }

  function cell(tr, text, label, cls) {
    const td = document.createElement('td');
    if (text instanceof Node) td.appendChild(text);
    else td.textContent = text;
    if (label) td.dataset.label = label;
    if (cls) td.className = cls;
    tr.appendChild(td);
    return td;
  }

  function emptyRow(tbody, cols, text) {
    const tr = document.createElement('tr');
    const td = document.createElement('td');
    td.colSpan = cols;
    td.className = 'muted';
    td.textContent = text;
    tr.appendChild(td);
    tbody.appendChild(tr);
  }

  function renderKeys(keys) {
    const tbody = $('keys-table').tBodies[0];
    tbody.replaceChildren();
    if (!keys.length) emptyRow(tbody, 5, 'No keys yet.');
    for (const k of keys) {
      const tr = document.createElement('tr');
      const revoked = !!k.revokedAt;
      if (revoked) tr.className = 'revoked';
      tr.dataset.hash = k.hash || '';
      cell(tr, k.label || '(no label)', 'Label');
      const code = document.createElement('code');
      code.textContent = k.hash || '';
      cell(tr, code, 'Hash prefix');
      cell(tr, when(k.createdAt), 'Created', 'nowrap');
      const badge = document.createElement('span');
      badge.className = 'badge ' + (revoked ? 'revoked' : 'live');
      badge.textContent = revoked ? 'Revoked ' + when(k.revokedAt) : 'Live';
      cell(tr, badge, 'Status');
      if (revoked) {
        cell(tr, '');
      } else {
        const b = document.createElement('button');
        b.type = 'button';
        b.className = 'button danger small revoke';
        b.textContent = 'Revoke';
        b.setAttribute('aria-label', 'Revoke key ' + (k.label || k.hash));
        b.addEventListener('click', () => askRevoke(k, b));
        cell(tr, b);
      }
      tbody.appendChild(tr);
    }
  }

  function renderAudit(entries) {
    const tbody = $('audit-table').tBodies[0];
    tbody.replaceChildren();
    if (!entries.length) emptyRow(tbody, 4, 'Nothing recorded yet.');
    for (const e of entries) {
      const tr = document.createElement('tr');
      cell(tr, when(e.at), 'When', 'nowrap');
      cell(tr, e.actor || '', 'Actor');
      cell(tr, e.action || '', 'Action');
      let d = e.detail;
      if (d && typeof d === 'object') d = JSON.stringify(d);
      cell(tr, d == null ? '' : String(d), 'Detail', 'detail');
      tbody.appendChild(tr);
    }
  }

  // ---- the chart: six bars of appends per month, drawn as SVG elements (no inline
  // style: every colour comes from app.css) ------------------------------------------

  function monthName(ym) {
    const m = /^(\d{4})-(\d{2})$/.exec(ym || '');
    if (!m) return { short: String(ym || ''), year: '' };
    const d = new Date(Date.UTC(+m[1], +m[2] - 1, 1));
    return { short: d.toLocaleString('en-US', { month: 'short', timeZone: 'UTC' }), year: m[1] };
  }

  function niceCeil(v) {
    if (v <= 0) return 10;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const f of [1, 2, 2.5, 5, 10]) {
      if (f * p >= v) return f * p;
    }
    return 10 * p;
  }

  function el(name, attrs, text) {
    const e = document.createElementNS(SVG, name);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function renderChart(months, quota) {
    const box = $('chart');
    const width = Math.max(280, Math.min(960, box.clientWidth || 640));
    const height = 220;
    const top = 24, bottom = 40, left = 8, right = 8;
    const values = months.map((m) => Number(m.appends || 0));
    const max = Math.max(0, ...values);
    let yMax = niceCeil(max);
    const showQuota = quota > 0 && max >= quota / 2;
    if (showQuota) yMax = Math.max(yMax, quota);
    const plotH = height - top - bottom;
    const slot = (width - left - right) / Math.max(1, months.length);
    const barW = Math.min(64, slot * 0.6);
    const y = (v) => top + plotH - (v / yMax) * plotH;

    const svg = el('svg', { viewBox: '0 0 ' + width + ' ' + height, width: width, height: height, 'aria-hidden': 'true', focusable: 'false' });
    svg.appendChild(el('line', { class: 'grid-line', x1: left, x2: width - right, y1: top, y2: top }));
    svg.appendChild(el('line', { class: 'axis', x1: left, x2: width - right, y1: top + plotH, y2: top + plotH }));
    months.forEach((m, i) => {
      const v = values[i];
      const cx = left + slot * i + slot / 2;
      const h = Math.max(v > 0 ? 2 : 0, (v / yMax) * plotH);
      const bar = el('rect', { class: 'bar' + (i === months.length - 1 ? ' current' : ''), x: cx - barW / 2, y: top + plotH - h, width: barW, height: h, rx: 3 });
      const name = monthName(m.month);
      bar.appendChild(el('title', {}, name.short + ' ' + name.year + ': ' + num(v) + ' appends'));
      svg.appendChild(bar);
      svg.appendChild(el('text', { class: 'value', x: cx, y: top + plotH - h - 6, 'text-anchor': 'middle' }, num(v)));
      svg.appendChild(el('text', { x: cx, y: top + plotH + 16, 'text-anchor': 'middle' }, name.short));
      if (i === 0 || name.short === 'Jan') {
        svg.appendChild(el('text', { x: cx, y: top + plotH + 32, 'text-anchor': 'middle', class: 'year' }, name.year));
      }
    });
    if (showQuota) {
      svg.appendChild(el('line', { class: 'quota-line', x1: left, x2: width - right, y1: y(quota), y2: y(quota) }));
    }
    box.replaceChildren(svg);
    $('chart-empty').hidden = max > 0;
    $('chart-legend').hidden = !showQuota;
    setText('chart-quota', num(quota));

    const tbody = $('chart-table').tBodies[0];
    tbody.replaceChildren();
    months.forEach((m, i) => {
      const tr = document.createElement('tr');
      const name = monthName(m.month);
      cell(tr, name.short + ' ' + name.year);
      cell(tr, num(values[i]));
      tbody.appendChild(tr);
    });
  }

  // ---- keys ------------------------------------------------------------------------

  const onCreateKey = onSubmit([['key-label', 'Give the new key a label, so you can tell your keys apart.']], async (form) => {
    const label = $('key-label').value.trim();
    const r = await api('POST', '/api/keys', { label });
    state.newToken = { token: r.token, tokenHash: r.tokenHash, label: 'Label “' + (r.label || label) + '”', welcome: '' };
    form.reset();
    renderNewToken();
    showStatus('Key “' + (r.label || label) + '” created. Copy it now: it is shown only once.');
    $('new-token').scrollIntoView({ block: 'start' });
    $('new-token-title').focus();
    await loadOverview();
  });

  function askRevoke(k, button) {
    clearMessages();
    state.revoke = { key: k, button };
    setText('revoke-text', 'The key “' + (k.label || '') + '” (hash prefix ' + k.hash + ') stops working at once: the log refuses its appends and reads. This cannot be undone.');
    const d = $('revoke-dialog');
    d.returnValue = '';
    d.showModal();
    $('revoke-cancel').focus();
  }

  async function onRevokeClosed() {
    const d = $('revoke-dialog');
    const pending = state.revoke;
    state.revoke = null;
    if (!pending) return;
    if (d.returnValue !== 'revoke') {
      pending.button.focus();
      return;
    }
    const k = pending.key;
    try {
      showStatus('Revoking “' + (k.label || k.hash) + '”…');
      await api('POST', '/api/keys/' + encodeURIComponent(k.hash) + '/revoke', {});
      if (state.newToken && state.newToken.tokenHash === k.hash) state.newToken = null;
      await loadOverview();
      showStatus('Key “' + (k.label || k.hash) + '” revoked. The log no longer accepts it.');
      $('keys-title').focus();
    } catch (err) {
      failed(err);
    }
  }

  // ---- billing ---------------------------------------------------------------------

  // goTo leaves for the provider's hosted page, but only to an http(s) address.
  function goTo(url) {
    let u;
    try { u = new URL(url, location.href); } catch (e) { u = null; }
    if (!u || (u.protocol !== 'https:' && u.protocol !== 'http:')) {
      throw new Error('The portal answered without a usable address; try again later.');
    }
    location.assign(u.href);
  }

  async function onBilling(button, path, what) {
    clearMessages();
    await busy(button, async () => {
      try {
        showStatus('Opening ' + what + '…');
        const r = await api('POST', path, {});
        goTo(r.url);
      } catch (err) {
        failed(err);
      }
    });
  }

  // ---- copying ---------------------------------------------------------------------

  async function onCopy(button) {
    const field = $(button.dataset.copy);
    const text = field.value;
    let ok = false;
    try {
      await navigator.clipboard.writeText(text);
      ok = true;
    } catch (e) {
      field.focus();
      field.select();
      try { ok = document.execCommand('copy'); } catch (e2) { ok = false; }
    }
    if (ok) {
      const label = button.dataset.label || button.textContent;
      button.dataset.label = label;
      button.textContent = 'Copied';
      setTimeout(() => { button.textContent = label; }, 2000);
      showStatus('Copied to the clipboard.', true);
    } else {
      field.focus();
      field.select();
      showError('Could not copy automatically. The text is selected: press Ctrl+C (⌘C on a Mac).');
    }
  }

  // ---- start -----------------------------------------------------------------------

  let resizeTimer = 0;

  async function start() {
    $('register-form').addEventListener('submit', onRegister);
    $('login-form').addEventListener('submit', onLogin);
    $('logout').addEventListener('click', onLogout);
    $('refresh').addEventListener('click', () => { clearMessages(); busy($('refresh'), loadOverview); });
    $('key-form').addEventListener('submit', onCreateKey);
    $('revoke-dialog').addEventListener('close', onRevokeClosed);
    $('upgrade').addEventListener('click', () => onBilling($('upgrade'), '/api/checkout', 'checkout'));
    $('manage').addEventListener('click', () => onBilling($('manage'), '/api/billing-portal', 'the billing portal'));
    $('new-token-done').addEventListener('click', () => {
      state.newToken = null;
      renderNewToken();
      $('keys-title').focus();
    });
    for (const b of document.querySelectorAll('button.copy')) {
      b.addEventListener('click', () => onCopy(b));
    }
    for (const input of document.querySelectorAll('input')) {
      input.addEventListener('input', () => input.removeAttribute('aria-invalid'));
    }
    window.addEventListener('hashchange', route);
    window.addEventListener('resize', () => {
      clearTimeout(resizeTimer);
      resizeTimer = setTimeout(() => {
        if (state.overview) renderChart(state.overview.months || [], Number(state.overview.quota || 0));
        fitAll();
      }, 150);
    });

    try {
      state.me = await api('GET', '/api/me');
    } catch (err) {
      state.me = null;
      if (!(err instanceof APIError && err.status === 401)) showError(err);
    }
    route();
    state.loaded = true;
    document.documentElement.dataset.ready = 'true';
  }

  start();
})();
