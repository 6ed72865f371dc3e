/* llamaforge history site: draws every plot of the page from its JSON block (id "page-data").
   Plot text comes HTML-escaped from the publisher; a click opens a commit's page only for http(s) URLs. */
(function () {
  "use strict";
  var block = document.getElementById("page-data");
  if (!block) { return; }
  if (typeof Plotly === "undefined") { throw new Error("plotly.js did not load (assets/plotly.min.js is missing)"); }
  var page = JSON.parse(block.textContent);
  (page.plots || []).forEach(function (p) {
    var div = document.getElementById(p.id);
    if (!div) { return; }
    Plotly.newPlot(div, p.data, p.layout, p.config);
    if (!p.clickable) { return; }
    div.on("plotly_click", function (ev) {
      var pt = ev && ev.points && ev.points[0];
      var url = pt && pt.customdata;
      if (typeof url === "string" && /^https?:\/\//i.test(url)) { window.open(url, "_blank", "noopener"); }
    });
  });
})();
