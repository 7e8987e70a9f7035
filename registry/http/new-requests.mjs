/**
 * Fount registry: HTTP requests. Every request to the source's endpoint becomes an event, and the
 * endpoint answers with the status, content type and body the user configures. The props have the
 * names, types and defaults of Pipedream's component with this key, so its docs and habits carry over.
 */
export default {
  key: "http-new-requests",
  name: "New Requests",
  description:
    "Get a URL and emit the full HTTP event on every request (method, path, query, headers and body). The response status code, content type and body can be configured.",
  version: "0.2.0",
  type: "source",
  props: {
    httpInterface: {
      type: "$.interface.http",
      // The component answers itself, so that the response can be configured.
      customResponse: true,
    },
    emitBodyOnly: {
      type: "boolean",
      label: "Body Only",
      description: "Emit only the request body instead of the whole request.",
      optional: true,
      default: false,
    },
    resStatusCode: {
      type: "string",
      label: "Response Status Code",
      description: "The HTTP status the endpoint answers with (a number from 100 to 599, as text).",
      optional: true,
      default: "200",
    },
    resContentType: {
      type: "string",
      label: "Response Content-Type",
      description: "The `Content-Type` of the answer.",
      optional: true,
      default: "application/json",
    },
    resBody: {
      type: "string",
      label: "Response Body",
      description: "The body of the answer, sent as written.",
      optional: true,
      default: '{ "success": true }',
    },
  },
  methods: {
    statusCode() {
      const status = Number(this.resStatusCode ?? "200");
      // A status outside HTTP's range would make the server refuse the answer; fall back to 200.
      return Number.isInteger(status) && status >= 100 && status <= 599 ? status : 200;
    },
  },
  async run(event) {
    this.httpInterface.respond({
      status: this.statusCode(),
      headers: { "content-type": this.resContentType ?? "application/json" },
      body: this.resBody ?? '{ "success": true }',
    });
    const summary = `${event.method} ${event.path}`;
    // An empty request has no body; emit null rather than nothing.
    if (this.emitBodyOnly) this.$emit(event.body ?? null, { summary });
    else this.$emit(event, { summary });
  },
};
