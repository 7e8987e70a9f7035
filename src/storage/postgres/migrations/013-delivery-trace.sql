-- With traces on (OTEL_EXPORTER_OTLP_ENDPOINT): the span a delivery's event was stored under, as a W3C
-- traceparent (and tracestate after a space), so that each attempt's span continues the event's trace
-- (src/tracing.ts). NULL when traces were off as the delivery was routed.
ALTER TABLE deliveries ADD COLUMN trace_context TEXT;
