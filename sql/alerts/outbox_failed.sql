UPDATE outbox SET attempts = attempts + 1, last_attempt_at = $at, last_error = $error
WHERE notification_id = $notification_id;
