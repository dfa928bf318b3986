// Original file: runstream/v1/runstream.proto


export interface CancelRun {
  'thread_id'?: (string);
  'run_id'?: (string);
  'reason'?: (string);
  'event_id'?: (string);
  'requested_by'?: (string);
}

export interface CancelRun__Output {
  'thread_id': (string);
  'run_id': (string);
  'reason': (string);
  'event_id': (string);
  'requested_by': (string);
}
