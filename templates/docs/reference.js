// Swagger UI over the OpenAPI document named on #swagger-ui. validatorUrl null: no badge fetched from
// swagger.io, so the page loads nothing from another host.
window.ui = SwaggerUIBundle({
  url: document.getElementById("swagger-ui").dataset.specUrl,
  dom_id: "#swagger-ui",
  validatorUrl: null,
  deepLinking: true,
  presets: [SwaggerUIBundle.presets.apis],
  layout: "BaseLayout",
});
