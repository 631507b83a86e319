UPDATE outbox SET attempts = attempts + 1, last_attempt_at = $at, sent_at = $at, sent_to = $target, last_error = NULL
WHERE notification_id = $notification_id;
