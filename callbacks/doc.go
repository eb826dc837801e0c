// Package callbacks is the HTTP intake of external services' replies: it authenticates (optional Standard Webhooks signatures), extracts execution_id and correlation_id from headers or body, and hands each reply to the aggregator as the api_response event. It does not touch wait states itself and knows nothing of Kafka.
package callbacks
