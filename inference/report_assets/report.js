// Filters, search and paging over every row of the report, without a server. The rows come from
// rows.js as data and are set as text (never parsed as HTML). With scripts off the static pages
// show the same rows.
(function () {
  "use strict";
  var data = window.REPORT_DATA;
  if (!data) { return; }
  var PAGE = 100;
  var page = 0;
  var ratings = {};
  var $ = function (id) { return document.getElementById(id); };
  var body = $("rows-body");
  var form = $("filters");
  if (!body || !form) { return; }
  form.hidden = false;
  Array.prototype.forEach.call(document.querySelectorAll("nav.pager"), function (nav) { nav.hidden = true; });
  var nav = document.createElement("nav");
  nav.className = "pager";
  nav.setAttribute("aria-label", "pages");
  $("rows-table").parentNode.insertBefore(nav, $("rows-table"));

  function value(id) { var el = $(id); return el ? el.value : ""; }

  function matches(row) {
    var search = value("f-search").toLowerCase();
    if (search && row.name.toLowerCase().indexOf(search) < 0) { return false; }
    if (value("f-decision") && row.decision !== value("f-decision")) { return false; }
    if (value("f-group") && row.group !== value("f-group")) { return false; }
    var low = parseFloat(value("f-min")), high = parseFloat(value("f-max"));
    if (!isNaN(low) && !(row.score !== null && row.score >= low)) { return false; }
    if (!isNaN(high) && !(row.score !== null && row.score <= high)) { return false; }
    return true;
  }

  function cell(tr, text, cls) {
    var td = document.createElement("td");
    if (cls) { td.className = cls; }
    if (text !== undefined && text !== null) { td.textContent = text; }
    tr.appendChild(td);
    return td;
  }

  // A relative path as a URL: each folder and file name encoded whole ("#" and "?" included, which
  // encodeURI keeps as fragment and query); pictures inside the page (data: URLs) as they are.
  function url(path) {
    return path.indexOf("data:") === 0 ? path : path.split("/").map(encodeURIComponent).join("/");
  }

  // A name's direction controls as their code points, as the static pages show them.
  function visibleName(name) {
    return name.replace(/[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g, function (c) {
      return "<U+" + c.charCodeAt(0).toString(16).toUpperCase().padStart(4, "0") + ">";
    });
  }

  function image(td, src, alt, href, box) {
    if (!src) { return; }
    var img = document.createElement("img");
    img.className = "thumb";
    img.loading = "lazy";
    img.alt = alt;
    img.src = src === href ? href : url(src);  // the scored file shown as itself: its link is a URL already
    if (box) {  // a box [x, width, height] of a strip file holding several pictures
      img.style.width = box[1] + "px";
      img.style.height = box[2] + "px";
      img.style.objectFit = "none";
      img.style.objectPosition = (-box[0]) + "px 0";
    }
    if (href) {
      var a = document.createElement("a");
      a.href = href;
      a.appendChild(img);
      td.appendChild(a);
    } else {
      td.appendChild(img);
    }
  }

  function rating(td, row) {
    var select = document.createElement("select");
    select.setAttribute("aria-label", "rating");
    ["", "genuine", "manipulated", "unsure"].forEach(function (option) {
      var o = document.createElement("option");
      o.textContent = option;
      select.appendChild(o);
    });
    select.value = ratings[row.name] || "";
    select.addEventListener("change", function () { ratings[row.name] = select.value; });
    td.appendChild(select);
  }

  function render() {
    var shown = data.rows.filter(matches);
    var pages = Math.max(1, Math.ceil(shown.length / PAGE));
    page = Math.min(page, pages - 1);
    while (body.firstChild) { body.removeChild(body.firstChild); }
    shown.slice(page * PAGE, (page + 1) * PAGE).forEach(function (row) {
      var tr = document.createElement("tr");
      tr.setAttribute("data-decision", row.decision || "");
      image(cell(tr), row.thumb, "thumbnail", row.link, row.thumb_box);
      cell(tr, visibleName(row.name), "name");
      if (!data.blinded) {
        cell(tr, row.score_text, "score");
        cell(tr, row.decision, "decision");
      }
      if (data.grouped) { cell(tr, row.group, "group"); }  // as the header: no column where no row has a group
      if (data.localizer && !data.blinded) {
        image(cell(tr), row.overlay, "map overlay", null, row.overlay_box);
        image(cell(tr), row.mask, "mask at threshold", null, row.mask_box);
        cell(tr, row.share === null || row.share === undefined ? "" : (100 * row.share).toFixed(1) + " %", "share");
      }
      if (data.blinded) { rating(cell(tr, null, "rating"), row); }
      cell(tr, row.note, "note");
      body.appendChild(tr);
    });
    $("f-count").textContent = shown.length + " of " + data.rows.length + " rows";
    while (nav.firstChild) { nav.removeChild(nav.firstChild); }
    [["previous", page - 1], ["next", page + 1]].forEach(function (item) {
      var button = document.createElement("button");
      button.type = "button";
      button.textContent = item[0];
      button.disabled = item[1] < 0 || item[1] >= pages;
      button.addEventListener("click", function () { page = item[1]; render(); });
      nav.appendChild(button);
    });
    var where = document.createElement("span");
    where.textContent = "page " + (page + 1) + " of " + pages;
    nav.appendChild(where);
  }

  ["f-search", "f-decision", "f-group", "f-min", "f-max"].forEach(function (id) {
    var el = $(id);
    if (el) { el.addEventListener("input", function () { page = 0; render(); }); }
  });

  // a name a spreadsheet would run as a formula (= + - @, a tab or a carriage return first) is kept
  // text by a leading ', and one starting with ' gets one more, as in the toolkit's own CSV files
  // (inference/csv_cells.py); a number is left as it is
  function spreadsheetText(text) {
    var number = /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/;
    var formula = /^[=+\-@\t\r]/.test(text) && !number.test(text);
    return text.charAt(0) === "'" || formula ? "'" + text : text;
  }

  if (data.blinded) {
    var save = document.createElement("a");
    save.textContent = "download ratings (CSV)";
    save.href = "#";
    save.addEventListener("click", function () {
      var lines = ["path,rating"].concat(data.rows.map(function (row) {
        return '"' + spreadsheetText(row.name).replace(/"/g, '""') + '",' + (ratings[row.name] || "");
      }));
      save.href = "data:text/csv;charset=utf-8," + encodeURIComponent(lines.join("\n") + "\n");
      save.download = "ratings.csv";
    });
    form.appendChild(save);
  }
  render();
}());
