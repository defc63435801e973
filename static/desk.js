// The desk's keyboard: j/k move through the queue, Enter opens, c claims, ? shows the help.
// Also keeps the reviewer's place when htmx polling swaps the queue in.
(function () {
  "use strict";

  var selectedId = null;

  function rows() {
    return Array.prototype.slice.call(document.querySelectorAll("#queue tr.row"));
  }

  function typing(event) {
    var t = event.target;
    if (!t || !t.tagName) return false;
    var tag = t.tagName.toLowerCase();
    return tag === "input" || tag === "textarea" || tag === "select" || t.isContentEditable;
  }

  function select(row, focus) {
    rows().forEach(function (r) {
      r.classList.remove("selected");
      r.removeAttribute("aria-current");
    });
    if (!row) return;
    row.classList.add("selected");
    row.setAttribute("aria-current", "true");
    selectedId = row.getAttribute("data-id");
    if (focus) {
      var link = row.querySelector("a.open");
      if (link) link.focus({ preventScroll: false });
    }
  }

  function current() {
    var all = rows();
    for (var i = 0; i < all.length; i++) {
      if (all[i].getAttribute("data-id") === selectedId) return i;
    }
    return -1;
  }

  function move(step) {
    var all = rows();
    if (!all.length) return;
    var i = current();
    var next = i < 0 ? 0 : Math.min(all.length - 1, Math.max(0, i + step));
    select(all[next], true);
  }

  function submit(form) {
    if (!form) return;
    if (typeof form.requestSubmit === "function") form.requestSubmit();
    else form.submit();
  }

  function help() {
    var dialog = document.getElementById("keys");
    if (!dialog) return;
    if (dialog.open) dialog.close();
    else dialog.showModal();
  }

  document.addEventListener("keydown", function (event) {
    if (event.defaultPrevented || event.ctrlKey || event.metaKey || event.altKey) return;
    if (typing(event)) return;
    var key = event.key;
    if (key === "?") {
      event.preventDefault();
      help();
      return;
    }
    var onQueue = document.getElementById("queue") !== null;
    if (onQueue && (key === "j" || key === "k")) {
      event.preventDefault();
      move(key === "j" ? 1 : -1);
    } else if (onQueue && key === "Enter") {
      var i = current();
      if (i >= 0 && document.activeElement === document.body) {
        var link = rows()[i].querySelector("a.open");
        if (link) {
          event.preventDefault();
          link.click();
        }
      }
    } else if (key === "c") {
      if (onQueue) {
        var at = current();
        if (at >= 0) {
          event.preventDefault();
          submit(rows()[at].querySelector("td.actions form[action$='/claim/']"));
        }
      } else {
        var claim = document.querySelector("form[data-claim]");
        if (claim) {
          event.preventDefault();
          submit(claim);
        }
      }
    }
  });

  // Every htmx request carries the current CSRF token: signing in again (in another tab)
  // rotates it, and the one the page was rendered with would be refused.
  document.addEventListener("htmx:configRequest", function (event) {
    var match = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
    if (match) event.detail.headers["X-CSRFToken"] = decodeURIComponent(match[1]);
  });

  // A request refused outside its view swaps nothing (what was typed stays) and says why here.
  document.addEventListener("bulkhead:refused", function (event) {
    var box = document.getElementById("refused");
    if (!box) return;
    box.textContent = (event.detail && event.detail.message) || "That was refused.";
    box.hidden = false;
  });

  // A row gets selected when its link is focused by Tab or clicked.
  document.addEventListener("focusin", function (event) {
    var row = event.target && event.target.closest ? event.target.closest("#queue tr.row") : null;
    if (row) select(row, false);
  });

  // After an action swaps the packet in, move the focus to what it says (the outcome or the
  // refusal): the button that had it is gone, and a screen reader should hear the result.
  document.addEventListener("htmx:afterSwap", function (event) {
    var target = event.detail && event.detail.target;
    if (!target || target.id !== "packet") return;
    var said = document.querySelector("#packet [data-focus]");
    if (said) said.focus({ preventScroll: false });
  });

  // After a poll or a claim swaps rows in, put the selection (and the focus) back where it was.
  document.addEventListener("htmx:beforeSwap", function () {
    var active = document.activeElement;
    var row = active && active.closest ? active.closest("#queue tr.row") : null;
    document.body.dataset.refocus = row ? "1" : "";
  });
  document.addEventListener("htmx:afterSettle", function () {
    if (selectedId === null) return;
    var row = document.querySelector('#queue tr.row[data-id="' + CSS.escape(selectedId) + '"]');
    if (!row) return;
    row.classList.add("selected");
    row.setAttribute("aria-current", "true");
    if (document.body.dataset.refocus === "1") {
      var link = row.querySelector("a.open");
      if (link) link.focus({ preventScroll: true });
    }
  });
})();
