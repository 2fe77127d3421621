// wfhost console: live updates. Every page works without this script; it
// follows the durable event stream (/live, server-sent events) from the
// cursor the page was made at, and when something happened fetches the
// page anew and swaps in its <main>. The browser resumes the stream after
// a reconnect from the last event it saw (Last-Event-ID). Nothing a child
// wrote passes through here: the server escapes every page it sends.
(function () {
  "use strict";
  var body = document.body;
  var cursor = body && body.getAttribute("data-cursor");
  var still = location.pathname === "/confirm" || location.pathname === "/do";
  if (!cursor || still || !window.EventSource || !window.fetch || !window.DOMParser) {
    return;
  }
  var live = document.getElementById("live");
  var timer = null;
  var busy = false;
  function say(text) {
    if (live) {
      live.textContent = text;
    }
  }
  function later(ms) {
    if (!timer) {
      timer = setTimeout(refresh, ms);
    }
  }
  function refresh() {
    timer = null;
    var active = document.activeElement;
    // Someone is typing an answer: wait until they are done.
    if (active && active.closest && active.closest("main form") && active.tagName !== "BUTTON") {
      later(1000);
      return;
    }
    if (busy) {
      later(300);
      return;
    }
    busy = true;
    fetch(location.href, { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (r) {
        if (!r.ok) {
          throw new Error("HTTP " + r.status);
        }
        return r.text();
      })
      .then(function (text) {
        var fresh = new DOMParser().parseFromString(text, "text/html").getElementById("main");
        var main = document.getElementById("main");
        if (fresh && main) {
          main.replaceWith(document.adoptNode(fresh));
        }
        say("live");
      })
      .catch(function () {
        say("offline");
      })
      .then(function () {
        busy = false;
      });
  }
  var source = new EventSource("/live?after=" + encodeURIComponent(cursor));
  source.addEventListener("open", function () {
    say("live");
  });
  source.addEventListener("error", function () {
    say("reconnecting…");
  });
  source.addEventListener("fact", function () {
    later(250);
  });
})();
