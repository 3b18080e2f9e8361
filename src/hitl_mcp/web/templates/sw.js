// hitl-mcp inbox service worker: caches the shell (styles, script, icons, offline page) and nothing
// else, and shows Web Push notifications. Pages, /api and /events always go to the network: requests and answers are never cached.
const CACHE = {{ cache_name|tojson }};
const SHELL = {{ shell|tojson }};
const OFFLINE = SHELL.find((url) => url.startsWith("/static/offline.html"));

self.addEventListener("install", (event) => {
  event.waitUntil(caches.open(CACHE).then((cache) => cache.addAll(SHELL)).then(() => self.skipWaiting()));
});

self.addEventListener("activate", (event) => {
  event.waitUntil(
    caches.keys()
      .then((keys) => Promise.all(keys.filter((k) => k.startsWith("hitl-shell-") && k !== CACHE).map((k) => caches.delete(k))))
      .then(() => self.clients.claim())
  );
});

self.addEventListener("fetch", (event) => {
  const request = event.request;
  if (request.method !== "GET") return;
  const url = new URL(request.url);
  if (url.origin !== self.location.origin) return;
  if (url.pathname.startsWith("/static/")) {
    event.respondWith(
      caches.match(request).then(
        (hit) => hit || fetch(request).catch(() => caches.match(request, { ignoreSearch: true }))
      )
    );
    return;
  }
  if (request.mode === "navigate") {
    // the page itself is live data: network only, with the offline page when there is no network
    event.respondWith(fetch(request).catch(() => caches.match(OFFLINE)));
  }
});

// --- Web Push (the webpush channel): show what the server pushed; Approve and Deny post their
// single-use token from here, and the notification then says what became of the answer.

const ICON = SHELL.find((url) => url.startsWith("/static/icon-192.png"));

self.addEventListener("push", (event) => {
  let data = {};
  try {
    data = event.data ? event.data.json() : {};
  } catch (_) {
    data = { title: "hitl-mcp", body: "A request is waiting" };
  }
  event.waitUntil(showPush(data));
});

async function showPush(data) {
  const tag = data.tag || "hitl";
  if (data.close) {
    // withdrawn: the request was cancelled
    const shown = await self.registration.getNotifications({ tag });
    shown.forEach((n) => n.close());
    return;
  }
  await self.registration.showNotification(data.title || "hitl-mcp", {
    body: data.body || "",
    tag,
    renotify: Boolean(data.renotify),
    silent: Boolean(data.silent),
    icon: ICON,
    actions: data.actions || [],
    data: {
      url: data.url || "/",
      request: data.request || null,
      tokens: data.tokens || null,
      answer: data.answer || null,
    },
  });
}

async function answerFromNotification(notification, action) {
  const d = notification.data || {};
  const token = d.tokens && d.tokens[action];
  if (!token || !d.answer) return openPage(d.url || "/");
  let message;
  try {
    const response = await fetch(d.answer, {
      method: "POST",
      credentials: "omit",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ request: d.request, token }),
    });
    message = (await response.json()).message || "Sent.";
  } catch (_) {
    message = "Not sent: no connection. Open the inbox to answer.";
  }
  await self.registration.showNotification(notification.title, {
    body: message,
    tag: notification.tag,
    silent: true,
    icon: ICON,
    data: { url: d.url || "/" },
  });
  return message;
}

function openPage(target) {
  return self.clients.matchAll({ type: "window", includeUncontrolled: true }).then((windows) => {
    for (const client of windows) {
      if ("focus" in client) {
        client.navigate(target);
        return client.focus();
      }
    }
    return self.clients.openWindow(target);
  });
}

self.addEventListener("notificationclick", (event) => {
  event.notification.close();
  event.waitUntil(answerFromNotification(event.notification, event.action));
});
