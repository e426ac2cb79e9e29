package events

import "strings"

// QualifiedToolID is a tool's one id in every event, record, verdict and
// subject: a tool is (server, tool name), so two MCP servers that both list
// get_issue are two tools, "github/get_issue" and "jira/get_issue". A tool
// observed with no server ("" here) keeps its bare name as its id, so the
// ids written before tools were qualified stay valid.
//
// The server part is the server's name with '%' and '/' percent-encoded
// ("%25", "%2F"), so it never holds a '/' and the first '/' of a qualified id
// separates the server from the tool's name, which may hold '/' itself (MCP
// tool names may: SEP-986). Every other character stays as it is; the subject
// token and KV key of the id escape what NATS needs (KeyToken), '/' excepted.
//
//	QualifiedToolID("github", "get_issue")        github/get_issue
//	QualifiedToolID("", "get_issue")              get_issue
//	QualifiedToolID("io.github.acme/crm", "find") io.github.acme%2Fcrm/find
//
// A producer that knows the server passes it with the bare MCP name; one
// that was given an id already qualified passes that id with no server.
func QualifiedToolID(server, tool string) string {
	if server == "" {
		return tool
	}
	if strings.ContainsAny(server, "%/") {
		server = strings.NewReplacer("%", "%25", "/", "%2F").Replace(server)
	}
	return server + "/" + tool
}

// SplitToolID is the inverse of QualifiedToolID: the server ("" for a
// bare id) and the tool's name. An id with no '/' is bare. The server part
// is decoded as QualifiedToolID encodes it; a '%' not followed by "25" or
// "2F" (in either case) stays as it is.
func SplitToolID(id string) (server, tool string) {
	i := strings.IndexByte(id, '/')
	if i < 0 {
		return "", id
	}
	server, tool = id[:i], id[i+1:]
	if strings.IndexByte(server, '%') >= 0 {
		var b strings.Builder
		for j := 0; j < len(server); j++ {
			if server[j] == '%' && j+2 < len(server) {
				switch strings.ToUpper(server[j+1 : j+3]) {
				case "25":
					b.WriteByte('%')
					j += 2
					continue
				case "2F":
					b.WriteByte('/')
					j += 2
					continue
				}
			}
			b.WriteByte(server[j])
		}
		server = b.String()
	}
	return server, tool
}
