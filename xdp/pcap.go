// SPDX-License-Identifier: Apache-2.0

package xdp

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
)

// ReadPcap returns the frames of a pcap file (microsecond or nanosecond, either byte order).
func ReadPcap(path string) ([][]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(data) < 24 {
		return nil, fmt.Errorf("%s: not a pcap file (%d bytes)", path, len(data))
	}
	var order binary.ByteOrder
	switch binary.LittleEndian.Uint32(data) {
	case 0xa1b2c3d4, 0xa1b23c4d:
		order = binary.LittleEndian
	case 0xd4c3b2a1, 0x4d3cb2a1:
		order = binary.BigEndian
	default:
		return nil, fmt.Errorf("%s: not a pcap file (magic %#x)", path, binary.LittleEndian.Uint32(data))
	}
	var frames [][]byte
	for off := 24; off < len(data); {
		if off+16 > len(data) {
			return nil, fmt.Errorf("%s: truncated record header at byte %d", path, off)
		}
		n := int(order.Uint32(data[off+8:]))
		off += 16
		if off+n > len(data) {
			return nil, fmt.Errorf("%s: truncated record at byte %d", path, off)
		}
		frames = append(frames, data[off:off+n])
		off += n
	}
	return frames, nil
}

// WritePcap writes frames as an Ethernet pcap file (timestamps zero).
func WritePcap(w io.Writer, frames [][]byte) error {
	hdr := make([]byte, 24)
	binary.LittleEndian.PutUint32(hdr[0:], 0xa1b2c3d4)
	binary.LittleEndian.PutUint16(hdr[4:], 2)
	binary.LittleEndian.PutUint16(hdr[6:], 4)
	binary.LittleEndian.PutUint32(hdr[16:], 65535)
	binary.LittleEndian.PutUint32(hdr[20:], 1)
	if _, err := w.Write(hdr); err != nil {
		return err
	}
	rec := make([]byte, 16)
	for _, f := range frames {
		binary.LittleEndian.PutUint32(rec[8:], uint32(len(f)))
		binary.LittleEndian.PutUint32(rec[12:], uint32(len(f)))
		if _, err := w.Write(rec); err != nil {
			return err
		}
		if _, err := w.Write(f); err != nil {
			return err
		}
	}
	return nil
}
