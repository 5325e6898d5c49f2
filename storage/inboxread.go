package storage

import (
	"encoding/binary"
	"fmt"

	"github.com/switchyard-router/switchyard"
)

// inboxReadKey is the inbox_reads key of inbox's partition of topic read
// as group (a Kafka group, a JetStream durable): one of another name is
// another reading, which starts where a new group or durable starts.
func inboxReadKey(inbox, group, topic string, partition int32) []byte {
	k := make([]byte, 0, len(inbox)+len(group)+len(topic)+7)
	k = append(append(k, inbox...), 0)
	k = append(append(k, group...), 0)
	k = append(append(k, topic...), 0)
	return binary.BigEndian.AppendUint32(k, uint32(partition))
}

// KeepRead keeps r as where inbox's reading of r's partition, as group
// (a Kafka group, a JetStream durable), goes on from, unless it kept a
// later one of the same topic or stream already (a batch read again after
// a failed one, or after an offset set back). One of another id (made
// again) replaces what was kept of the old.
func (tx *Tx) KeepRead(inbox, group string, r switchyard.Read) error {
	b := tx.bucket(bucketInboxReads)
	k := inboxReadKey(inbox, group, r.Topic, r.Partition)
	if old, ok := decodeInboxRead(tx.get(b, k)); ok && old.ID == r.ID && old.Next >= r.Next {
		return nil
	}
	v := binary.BigEndian.AppendUint64(make([]byte, 0, 24), uint64(r.Next))
	return b.Put(k, append(v, r.ID[:]...))
}

// InboxRead is what KeepRead kept of inbox's partition of topic read as
// group; false when nothing was.
func (tx *Tx) InboxRead(inbox, group, topic string, partition int32) (switchyard.Read, bool, error) {
	v := tx.get(tx.bucket(bucketInboxReads), inboxReadKey(inbox, group, topic, partition))
	if v == nil {
		return switchyard.Read{}, false, nil
	}
	r, ok := decodeInboxRead(v)
	if !ok {
		return switchyard.Read{}, false, fmt.Errorf("storage: the read kept for inbox %q, %s/%d, is %d bytes, not 24", inbox, topic, partition, len(v))
	}
	r.Topic, r.Partition = topic, partition
	return r, true, nil
}

// decodeInboxRead decodes an inbox_reads value: where to go on, and the id.
func decodeInboxRead(v []byte) (switchyard.Read, bool) {
	if len(v) != 24 {
		return switchyard.Read{}, false
	}
	r := switchyard.Read{Next: int64(binary.BigEndian.Uint64(v))}
	copy(r.ID[:], v[8:])
	return r, true
}
