/**
 * Fount registry: HTTP requests. Every request to the source's endpoint becomes an event; the endpoint
 * answers with a status and body the user configures.
 */
export default {
  key: "http-new-requests",
  name: "New Requests",
  description:
    "Get a URL and emit every HTTP request sent to it: method, path, query, headers and body. The response status and body can be configured.",
  version: "0.1.0",
  type: "source",
  props: {
    http: {
      type: "$.interface.http",
      // The component answers itself, so that the status and body can be configured.
      customResponse: true,
    },
    emitBodyOnly: {
      type: "boolean",
      label: "Body Only",
      description: "Emit only the request body instead of the whole request.",
      optional: true,
      default: false,
    },
    responseStatus: {
      type: "integer",
      label: "Response Status Code",
      description: "The HTTP status the endpoint answers with.",
      optional: true,
      default: 200,
      min: 100,
      max: 599,
    },
    responseBody: {
      type: "string",
      label: "Response Body",
      description:
        'The body the endpoint answers with. Text that parses as JSON is sent as `application/json`, other text as `text/plain`. Default: `{"success": true}`.',
      optional: true,
    },
  },
  methods: {
    response() {
      const status = Number(this.responseStatus ?? 200);
      if (this.responseBody === undefined || this.responseBody === null || this.responseBody === "") {
        return { status, headers: { "content-type": "application/json" }, body: { success: true } };
      }
      const text = String(this.responseBody);
      let json = false;
      try {
        JSON.parse(text);
        json = true;
      } catch {
        // Plain text.
      }
      return {
        status,
        headers: { "content-type": json ? "application/json" : "text/plain; charset=utf-8" },
        body: text,
      };
    },
  },
  async run(event) {
    const { method, path, query, headers, body } = event;
    const summary = `${method} ${path}`;
    if (this.emitBodyOnly) {
      // An empty request has no body; emit null rather than nothing.
      this.$emit(body ?? null, { summary });
    } else {
      this.$emit({ method, path, query, headers, body }, { summary });
    }
    this.http.respond(this.response());
  },
};
