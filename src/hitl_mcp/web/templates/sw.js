// hitl-mcp inbox service worker: caches the shell (styles, script, icons, offline page) and nothing
// else. Pages, /api and /events always go to the network: requests and answers are never cached.
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

self.addEventListener("notificationclick", (event) => {
  event.notification.close();
  const target = (event.notification.data && event.notification.data.url) || "/";
  event.waitUntil(
    self.clients.matchAll({ type: "window", includeUncontrolled: true }).then((windows) => {
      for (const client of windows) {
        if ("focus" in client) {
          client.navigate(target);
          return client.focus();
        }
      }
      return self.clients.openWindow(target);
    })
  );
});
