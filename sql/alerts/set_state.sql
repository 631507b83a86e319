UPDATE alerts SET state = $state, updated_at = $at WHERE alert_id = $alert_id;
