package inject

import (
	"errors"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
)

// MaxReviewBytes bounds a review's body. The API server's own request
// limit is 3 MiB per object; a CREATE carries one object, an UPDATE two
// (the pod and the pod as it was).
const MaxReviewBytes = 8 << 20

// Paths of the two webhook entries (see Scope).
const (
	PathNamespace = "/mutate/namespace"
	PathPod       = "/mutate/pod"
)

// Handler serves one webhook entry: POST of an AdmissionReview v1 as JSON.
type Handler struct {
	Config  Config
	Scope   Scope
	Log     *slog.Logger
	MaxBody int64 // 0: MaxReviewBytes
}

// NewMux serves both webhook entries and /healthz.
func NewMux(cfg Config, log *slog.Logger) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle(PathNamespace, Handler{Config: cfg, Scope: ScopeNamespace, Log: log})
	mux.Handle(PathPod, Handler{Config: cfg, Scope: ScopePod, Log: log})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	return mux
}

// ServeHTTP answers one AdmissionReview, or a 4xx with the reason.
func (h Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		problem(w, http.StatusMethodNotAllowed, "method "+r.Method+": an AdmissionReview is POSTed")
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		problem(w, http.StatusUnsupportedMediaType, "content type "+strconv.Quote(r.Header.Get("Content-Type"))+": want application/json")
		return
	}
	limit := h.MaxBody
	if limit <= 0 {
		limit = MaxReviewBytes
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			problem(w, http.StatusRequestEntityTooLarge, "review is larger than "+strconv.FormatInt(limit, 10)+" bytes")
			return
		}
		problem(w, http.StatusBadRequest, "reading the review: "+err.Error())
		return
	}
	req, pod, err := Decode(body)
	if err != nil {
		h.log().Warn("admission review refused", "error", err.Error())
		problem(w, http.StatusBadRequest, err.Error())
		return
	}
	resp := Mutate(req, pod, h.Config, h.Scope)
	out, err := Encode(req, resp)
	if err != nil {
		problem(w, http.StatusInternalServerError, "encoding the response: "+err.Error())
		return
	}
	name := pod.Name
	if name == "" {
		name = pod.GenerateName + "*"
	}
	h.log().Info("admission", "uid", string(req.UID), "operation", string(req.Operation), "subresource", req.SubResource, "namespace", req.Namespace, "pod", name,
		"allowed", resp.Allowed, "patched", len(resp.Patch) > 0, "decision", resp.AuditAnnotations[DecisionKey],
		"dry_run", req.DryRun != nil && *req.DryRun)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

func (h Handler) log() *slog.Logger {
	if h.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return h.Log
}

func problem(w http.ResponseWriter, code int, reason string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = io.WriteString(w, reason+"\n") //nolint:gosec // text/plain with nosniff: a reason for the API server's log, never rendered
}
