package fsutil

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestJSONRecordRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state", "record.json")
	var none []string
	if found, err := ReadJSON(path, &none); found || err != nil || none != nil {
		t.Fatalf("absent record: found=%v err=%v v=%v", found, err, none)
	}
	changed, err := WriteJSON(path, []string{"a", "b"})
	if err != nil || !changed {
		t.Fatalf("first write: changed=%v err=%v", changed, err)
	}
	if changed, err := WriteJSON(path, []string{"a", "b"}); err != nil || changed {
		t.Fatalf("same record again: changed=%v err=%v", changed, err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode: %v %v", fi, err)
	}
	data, _ := os.ReadFile(path)
	if string(data) != "[\n  \"a\",\n  \"b\"\n]\n" {
		t.Fatalf("bytes: %q", data)
	}
	var got []string
	if found, err := ReadJSON(path, &got); !found || err != nil || strings.Join(got, ",") != "a,b" {
		t.Fatalf("read: found=%v err=%v v=%v", found, err, got)
	}
}

func TestReadJSONNamesADamagedRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), "record.json")
	if err := os.WriteFile(path, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	var v map[string]string
	found, err := ReadJSON(path, &v)
	if !found || err == nil || !strings.HasPrefix(err.Error(), path+": ") {
		t.Fatalf("found=%v err=%v", found, err)
	}
}

func TestWriteJSONRefusesWhatCannotBeEncoded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "record.json")
	if _, err := WriteJSON(path, map[string]any{"f": func() {}}); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("err=%v", err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("a record that failed to encode left a file: %v", err)
	}
}
