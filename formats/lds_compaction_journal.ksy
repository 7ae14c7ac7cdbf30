meta:
  id: lds_compaction_journal
  title: LDS compaction journal record (version log payload)
  license: Apache-2.0
  endian: le
  imports:
    - lds_chunk_meta
doc: |
  Payload of a `compaction_journal` log object: the whole merge state of a
  long compaction (not a delta of the previous record). Note that the counts
  are in the order inputs, outputs, cleaned while the lists are in the order
  inputs, cleaned, outputs. The payload is exactly the structure (no
  trailing bytes), with zero reserved bytes, levels below 16 and every
  cleaned chunk one of the inputs.
doc-ref: SPEC.md §6.3
seq:
  - id: compaction_id
    type: u8
    doc: Unique within the instance, increasing.
  - id: source_level
    type: u1
    valid:
      max: 15
  - id: target_level
    type: u1
    valid:
      max: 15
    doc: Both levels are below the level limit 16 (SPEC.md §16).
  - id: reserved
    size: 2
    valid: '[0, 0]'
  - id: num_inputs
    type: u4
  - id: num_outputs
    type: u4
  - id: num_cleaned
    type: u4
  - id: len_resume_key
    type: u2
  - id: resume_key
    size: len_resume_key
    doc: |
      The largest key of the last persisted output; the merge continues with
      keys strictly greater.
  - id: inputs
    type: u8
    repeat: expr
    repeat-expr: num_inputs
    doc: Chunk ids of the chunks the compaction reads.
  - id: cleaned
    type: cleaned_chunk
    repeat: expr
    repeat-expr: num_cleaned
    doc: The inputs already cleaned; a subset of `inputs`.
  - id: outputs
    type: lds_chunk_meta
    repeat: expr
    repeat-expr: num_outputs
    doc: The outputs persisted so far, in key order.
  - id: trailing
    size-eos: true
    valid:
      expr: _.size == 0
    doc: Nothing may follow the last output in the payload.
types:
  cleaned_chunk:
    doc: One cleaned input; its id MUST be one of `inputs`.
    seq:
      - id: chunk_id
        type: u8
      - id: inputs_searched
        type: input_match(_index)
        repeat: until
        repeat-until: _.is_match or _.i + 1 >= _parent.num_inputs
        if: _parent.num_inputs > 0
        doc: "`inputs[0]`, `inputs[1]`, ... up to the first equal to `chunk_id` (reads nothing)."
      - id: check_is_input
        size: 0
        valid:
          expr: is_input
        doc: Reads nothing; fails when `chunk_id` is not an input.
    instances:
      is_input:
        value: _parent.num_inputs > 0 and inputs_searched.last.is_match
  input_match:
    params:
      - id: i
        type: u4
    instances:
      is_match:
        value: _parent._parent.inputs[i] == _parent.chunk_id
