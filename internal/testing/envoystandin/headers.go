package envoystandin

import (
	"maps"
	"net/http"
	"slices"
	"strings"
	"unicode/utf8"
)

// header is one entry of an Envoy header map: a lower-case key and a value.
type header struct{ key, value string }

// headerMap models Envoy's Http::HeaderMap: an ordered list of entries with
// lower-case keys, where one key may appear several times and the
// pseudo-headers (":method", ":path", ":authority", ":scheme", ":status")
// live in the same map, ahead of the regular headers.
type headerMap struct{ entries []header }

func isPseudo(key string) bool { return strings.HasPrefix(key, ":") }

// get returns every value of key, in order.
func (h *headerMap) get(key string) []string {
	key = strings.ToLower(key)
	var out []string
	for _, e := range h.entries {
		if e.key == key {
			out = append(out, e.value)
		}
	}
	return out
}

// first returns the first value of key.
func (h *headerMap) first(key string) (string, bool) {
	if v := h.get(key); len(v) > 0 {
		return v[0], true
	}
	return "", false
}

func (h *headerMap) has(key string) bool { _, ok := h.first(key); return ok }

// add is HeaderMap::addCopy: a new entry, whatever is already there.
// Pseudo-headers are kept ahead of regular headers, as Envoy's map does.
func (h *headerMap) add(key, value string) {
	key = strings.ToLower(key)
	e := header{key, value}
	if !isPseudo(key) {
		h.entries = append(h.entries, e)
		return
	}
	i := 0
	for i < len(h.entries) && isPseudo(h.entries[i].key) {
		i++
	}
	h.entries = slices.Insert(h.entries, i, e)
}

// set is HeaderMap::setCopy: every existing entry of key goes, one entry
// with value takes its place.
func (h *headerMap) set(key, value string) {
	h.remove(key)
	h.add(key, value)
}

// appendCopy is HeaderMap::appendCopy: the value joins the first existing
// entry, separated by ","; with no entry, it is added.
func (h *headerMap) appendCopy(key, value string) {
	key = strings.ToLower(key)
	for i, e := range h.entries {
		if e.key == key {
			if e.value == "" {
				h.entries[i].value = value
			} else {
				h.entries[i].value = e.value + "," + value
			}
			return
		}
	}
	h.add(key, value)
}

func (h *headerMap) remove(key string) {
	key = strings.ToLower(key)
	h.entries = slices.DeleteFunc(h.entries, func(e header) bool { return e.key == key })
}

// httpHeader renders the regular (non-pseudo) headers for net/http.
func (h *headerMap) httpHeader() http.Header {
	out := http.Header{}
	for _, e := range h.entries {
		if !isPseudo(e.key) {
			out.Add(e.key, e.value)
		}
	}
	return out
}

// hopByHop are the connection-level headers Envoy's HTTP/1 codec consumes
// and never passes to filters or forwards (RFC 9110 §7.6.1).
var hopByHop = map[string]bool{
	"connection": true, "keep-alive": true, "proxy-connection": true,
	"transfer-encoding": true, "upgrade": true, "te": true, "trailer": true,
}

// fromHTTP copies net/http headers into h, lower-casing keys and dropping
// hop-by-hop headers and any header the Connection header names. Keys are
// taken in sorted order so the map is deterministic (net/http has already
// lost the wire order); the values of one key keep their order.
func (h *headerMap) fromHTTP(src http.Header) {
	drop := map[string]bool{}
	for _, v := range src.Values("Connection") {
		for f := range strings.SplitSeq(v, ",") {
			drop[strings.ToLower(strings.TrimSpace(f))] = true
		}
	}
	for _, k := range slices.Sorted(maps.Keys(src)) {
		lk := strings.ToLower(k)
		if hopByHop[lk] || drop[lk] {
			continue
		}
		for _, v := range src[k] {
			h.add(lk, v)
		}
	}
}

// validHeaderName and validHeaderValue follow Envoy's
// HeaderUtility::headerNameIsValid / headerValueIsValid: a token
// (pseudo-headers allowed) and a value without CR, LF or NUL.
func validHeaderName(k string) bool {
	if k == "" {
		return false
	}
	name := strings.TrimPrefix(k, ":")
	if name == "" {
		return false
	}
	for _, c := range []byte(name) {
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

func validHeaderValue(v string) bool {
	return !strings.ContainsAny(v, "\r\n\x00")
}

// sanitizeUTF8 is MessageUtil::sanitizeUtf8String: every byte that is not
// part of valid UTF-8 becomes '!'. Envoy applies it to the string fields of
// a CheckRequest (headers, path, body when not pack_as_bytes).
func sanitizeUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n <= 1 {
			b.WriteByte('!')
			i++
			continue
		}
		b.WriteString(s[i : i+n])
		i += n
	}
	return b.String()
}
